//! mailsluice: an SMTP relay proxy with per-tenant throttling.
//!
//! Data flows one way: listener -> session -> policy -> throttle -> upstream. Each module
//! imports only from the ones below it in this table, and `clock` and `config` (plain data) from
//! nothing:
//!
//! | module | what it holds |
//! |---|---|
//! | `serve/` | wiring: the accept loop and graceful shutdown (`server`: [`run`]), SIGHUP (`reload`), layers at an SES account's own rate (`account`), the subcommands `check`, `peek`, `hash-password` (`commands`) |
//! | `admin/` | the admin HTTP endpoint (`endpoint`): `/` (the status page, `status_page`), `/healthz`, `/readyz`, `/metrics`, `/buckets/{layer}/{key}` |
//! | `fuzzing` | (feature `fuzzing`) a session over an in-memory stream, for `fuzz/` and tests |
//! | `smtp/` | one client's session: the state machine, one file per verb, the final dot (`deliver`: the wait for tokens in `waiter`, the upstream leg in `forward`, one `verdict` answered and logged once), every reply text (`reply`) |
//! | `state/` | what the running relay's tasks share: `Deps`, `Context`, `Live` (`context`); the one shutdown signal (`shutdown`) |
//! | `observe/` | what the relay records about itself: Prometheus metrics (`metrics`), the last refusals (`recent`), the human log format's fields (`log_format`), OTLP traces of the messages (`traces`) |
//! | `inbound/` | inbound security: TLS (`tls`), password hashes (`password`), the AUTH lockout (`auth_lockout`), connections per client address (`connection_limit`) |
//! | `reputation/` | the tenant reputation guard: SES's bounce and complaint events parsed (`events`), counted per tenant over a sliding window (`ledger`), attributed by SES's message id (`attribution`), suppressed addresses (`suppression`); where all of it lives, behind one trait (`store`): in process (`store::local`) or, with `[redis]`, in Redis shared by every replica (`store::redis`, failing open) |
//! | `policy` | which upstream a message takes (`route`), which buckets it is charged to, how much, and which key headers it loses |
//! | `throttle/` | token buckets (pure math in `bucket`), key tables, stores (local; Redis: its scripts and keys, over `redis/`'s connection), layers with FIFO queues (fair by tenant with `fair_by`) |
//! | `upstream/` | the `Forwarder` trait, one module per kind: `smtp` (our SMTP client and pool, pipelining), `mx` (direct delivery, hickory-resolver), `ses` (SES's v2 API through the AWS SDK, SES tenants), `file`; what a refusal says about our sending, typed (`feedback`); the named upstreams (`upstreams`) |
//! | `message/` | plain data about one message: its `Envelope`, its `Outcome`, its header fields by byte range (`header`) |
//! | `redis/` | Redis as the throttle's shared layers and the reputation guard reach it, each with its own scripts and keys: its options from `[redis]` (`options`), a connection to one server, a Cluster or the primary that Sentinel names, followed through a failover (`connection`), a call that did not answer (`error`) |
//! | `clock` | monotonic integer time, injected (`Clock`; `TokioClock`, `FakeClock` for tests) |
//! | `config/` | the TOML schema, its defaults and validation; `config/upstream/` the keys every upstream shares and each kind's own |
//!
//! A new kind of upstream touches these files and no others:
//! - `config/upstream/<kind>.rs` (new): its URL, its keys and their checks;
//! - `config/upstream/kind.rs`: its variant of `UpstreamKind`, with its arms there (scheme,
//!   keys, URL text, SMTP client settings if it speaks SMTP);
//! - `upstream/<kind>.rs` (new): its `Forwarder`, which returns its refusals typed (an
//!   `UpstreamError::Pushback` with a `Feedback` when upstream pushed back on our sending);
//! - `upstream/mod.rs`: its `mod` line and its arm in `build_forwarder`;
//! - docs/configuration.md: the rows of its keys (a test fails without them).
//!
//! A kind with a route key of its own (`ses_tenant`, SES's tenant) also has it in
//! `config/route.rs` and `policy/route.rs`, handed to its forwarder by the final dot
//! (`Forwarder::forward_for_tenant`); a bound of its own on the message size shows at `MAIL`
//! through `Config::max_message_bytes`.
//!
//! `main.rs` only parses the command line and dispatches: to serve, it loads the config, binds
//! and calls [`run`]; the other subcommands are in `serve::commands`.

pub mod admin;
pub mod clock;
pub mod config;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod inbound;
pub mod message;
pub mod observe;
pub mod policy;
pub mod redis;
pub mod reputation;
pub mod serve;
pub mod smtp;
pub mod state;
pub mod throttle;
pub mod upstream;

pub use serve::server::{run, Listeners};
pub use state::context::{Context, Deps};
