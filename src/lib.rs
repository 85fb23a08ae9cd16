//! mailsluice: an SMTP relay proxy with per-tenant throttling.
//!
//! Data flows one way: listener -> session -> policy -> throttle -> upstream. Each module
//! imports only from the ones below it in this table, and `config` (plain data) from nothing:
//!
//! | module | what it holds |
//! |---|---|
//! | `server` | the accept loop, the connection bounds, graceful shutdown: [`run`] |
//! | `admin` | the HTTP endpoint: `/` (the status page, rendered by `status_page`), `/healthz`, `/readyz`, `/metrics`, `/buckets/{layer}/{key}` |
//! | `status_page` | the HTML of `/`: readiness, layers, most waiting keys, last refusals |
//! | `reload` | SIGHUP: a new context from a new config, unchanged layers kept |
//! | `smtp/` | one client's session: the state machine, one file per verb, the final dot (`deliver`, and its upstream leg `forward`), every reply text (`reply`) |
//! | `context` | `Deps` (what `run` needs), `Context` (what a session reads), `Live` (the context in force) |
//! | `policy` | which upstream a message takes (`route`), which buckets it is charged to, how much, and which key headers it loses |
//! | `recent` | the last refusals, and refusals per layer in the last minute (status page) |
//! | `metrics` | the Prometheus registry and what is counted |
//! | `throttle/` | token buckets (pure math in `bucket`), key tables, stores (local, Redis), layers with FIFO queues (fair by tenant with `fair_by`) |
//! | `upstream/` | the `Forwarder` trait: `smtp` (lettre connections, our pool, pipelining), `mx` (direct delivery, hickory-resolver), `file`; the named upstreams (`upstreams`) |
//! | `tls` | inbound TLS: PEM loading, the rustls acceptor, its reload |
//! | `connection_limit` | connections held per client address |
//! | `auth_lockout` | failed AUTH attempts per client address, and the lockout |
//! | `password` | argon2id password hashes for `[smtp.auth] users`, and the verifier that bounds checks in flight (memory) |
//! | `shutdown` | the one shutdown signal every task listens to |
//! | `log_format` | the human log format's fields, client-supplied values quoted and escaped |
//! | `config/` | the TOML schema, its defaults and validation |
//! | `fuzzing` | (feature `fuzzing`) a session over an in-memory stream, for `fuzz/` and tests |
//!
//! `main.rs` only parses the command line, loads the config, binds and calls [`run`].

pub mod admin;
pub mod auth_lockout;
pub mod config;
pub mod connection_limit;
pub mod context;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod log_format;
pub mod metrics;
pub mod password;
pub mod policy;
pub mod recent;
pub mod reload;
pub mod server;
pub mod shutdown;
pub mod smtp;
pub mod status_page;
pub mod throttle;
pub mod tls;
pub mod upstream;

pub use context::{Context, Deps};
pub use server::{run, Listeners};
