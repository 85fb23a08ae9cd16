//! mailsluice: an SMTP relay proxy with per-tenant throttling.
//!
//! Layout of the crate (each concept in the file named after it):
//! - `config`     the TOML schema, its defaults and validation.
//! - `smtp/`      the inbound ESMTP server: `server` accepts, `session` runs the state
//!                machine, one file per verb, `reply` holds the reply texts, `data` reads DATA.
//! - `throttle/`  token buckets (pure math in `bucket`), FIFO queues per key, stacked layers.
//! - `policy`     which bucket a message is charged to, and its cost.
//! - `upstream/`  the `Forwarder` trait and its implementations (`smtp` via lettre, `file`).
//! - `shutdown`   the one shutdown signal every task listens to.
//!
//! `run(listeners, deps, shutdown)` serves until the shutdown signal; `main.rs` only parses
//! the command line, loads the config and calls it.

pub mod config;
pub mod policy;
pub mod server;
pub mod shutdown;
pub mod smtp;
pub mod throttle;
pub mod upstream;

pub use server::{run, Context, Deps};
