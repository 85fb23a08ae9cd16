//! mailsluice: an SMTP relay proxy with per-tenant throttling.
//!
//! Data flows one way: listener -> session -> policy -> throttle -> upstream. Each module
//! imports only from the ones below it in this table, and `config` (plain data) from nothing:
//!
//! | module | what it holds |
//! |---|---|
//! | `serve/` | wiring: the accept loop, the connection bounds, graceful shutdown (`server`: [`run`]); SIGHUP, a new context from a new config, unchanged layers kept (`reload`); the subcommands `check`, `peek`, `hash-password` (`commands`) |
//! | `admin/` | the HTTP endpoint (`endpoint`): `/` (the status page, rendered by `status_page`), `/healthz`, `/readyz`, `/metrics`, `/buckets/{layer}/{key}` |
//! | `fuzzing` | (feature `fuzzing`) a session over an in-memory stream, for `fuzz/` and tests |
//! | `smtp/` | one client's session: the state machine, one file per verb, the final dot (`deliver`, and its upstream leg `forward`), every reply text (`reply`) |
//! | `state/` | what the running relay's tasks share: `Deps` (what `run` needs), `Context` (what a session reads), `Live` (the context in force) in `context`; the one shutdown signal (`shutdown`) |
//! | `observe/` | what the relay records about itself: the Prometheus registry and what is counted (`metrics`), the last refusals and refusals per layer in the last minute (`recent`), the human log format's fields, client-supplied values quoted and escaped (`log_format`) |
//! | `inbound/` | inbound security: TLS (PEM loading, the rustls acceptor, its reload: `tls`), argon2id password hashes and the verifier that bounds checks in flight (`password`), failed AUTH attempts per client address and the lockout (`auth_lockout`), connections held per client address (`connection_limit`) |
//! | `policy` | which upstream a message takes (`route`), which buckets it is charged to, how much, and which key headers it loses |
//! | `throttle/` | token buckets (pure math in `bucket`), key tables, stores (local, Redis), layers with FIFO queues (fair by tenant with `fair_by`) |
//! | `upstream/` | the `Forwarder` trait: `smtp` (lettre connections, our pool, pipelining), `mx` (direct delivery, hickory-resolver), `file`; the named upstreams (`upstreams`) |
//! | `message/` | plain data about one message: its `Envelope`, its `Outcome` |
//! | `config/` | the TOML schema, its defaults and validation |
//!
//! `main.rs` only parses the command line, loads the config, binds and calls [`run`].

pub mod admin;
pub mod config;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod inbound;
pub mod message;
pub mod observe;
pub mod policy;
pub mod serve;
pub mod smtp;
pub mod state;
pub mod throttle;
pub mod upstream;

pub use serve::server::{run, Listeners};
pub use state::context::{Context, Deps};
