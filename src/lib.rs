//! mailsluice: an SMTP relay proxy with per-tenant throttling.
//!
//! Layout of the crate (each concept in the file named after it):
//!
//! | module | what it holds |
//! |---|---|
//! | `config` | the TOML schema, its defaults and validation |
//! | `server` | the accept loop, the connection bound, graceful shutdown; `Deps` and `Context` |
//! | `smtp/` | one client's session: `session` is the state machine, one file per verb (`ehlo`, `mail`, `rcpt`, `data`, `starttls`, `auth`, `misc`), `deliver` the final dot, `data_reader` the DATA bytes, `reply` every reply text |
//! | `tls` | inbound TLS: PEM loading, the rustls acceptor, its reload on SIGHUP |
//! | `password` | argon2id password hashes for `[smtp.auth] users` |
//! | `per_ip` | bounded per-address tables: connections held, failed AUTH attempts (lockout) |
//! | `throttle/` | token buckets (pure math in `bucket`), FIFO queues per key, stacked layers, stores |
//! | `policy` | which buckets a message is charged to, and how much |
//! | `upstream/` | the `Forwarder` trait: `smtp` (lettre connections, our pool), `file` |
//! | `shutdown` | the one shutdown signal every task listens to |
//! | `admin` | the HTTP endpoint: `/healthz`, `/readyz`, `/metrics`, `/buckets/{layer}/{key}` |
//! | `metrics` | the Prometheus registry and what is counted |
//! | `reload` | SIGHUP: the current context, swapped for new messages |
//! | `fuzzing` | (hidden) a session over an in-memory stream, for `fuzz/` and property tests |
//!
//! `run(listeners, deps, shutdown)` serves until the shutdown signal; `main.rs` only parses
//! the command line, loads the config and calls it.

pub mod admin;
pub mod config;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod metrics;
pub mod password;
pub mod per_ip;
pub mod policy;
pub mod reload;
pub mod server;
pub mod shutdown;
pub mod smtp;
pub mod throttle;
pub mod tls;
pub mod upstream;

pub use server::{run, Context, Deps};
