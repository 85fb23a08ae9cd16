//! The throttle engine: token buckets per key, FIFO queues in front of them, stacked layers.
//!
//! Why it is a module of its own, with no SMTP in it: it is the part whose mistakes cost money
//! or mail (going over a provider's quota, or losing a client's message to a wrong refusal),
//! so it is built to be tested exhaustively with a fake or paused clock (`crate::clock`) and
//! never a sleep. It imports nothing of the crate but `clock`, `redis` (the connection its
//! Redis store calls through) and `config` (plain data: `Mode`, `Refill`, `OnError`).
//!
//! Files, each importing only from the ones listed before it:
//! - [`bucket`]: the pure math of the three refill modes (drip, fixed window, lifetime).
//! - [`adaptive`]: the pure math of an adaptive layer's effective limit (AIMD).
//! - `blame`: whether a throttle reply is one tenant's alone (then the layer does not cut).
//! - `spec`, `error`, `peek`, `charge`: the small types every part below shares (a layer's
//!   numbers, the refusals, a bucket's allowance, what a message is charged), apart so that
//!   none of those parts has to import another for them.
//! - `key_table`: one layer's buckets in process, bounded by `max_keys`, idle ones forgotten.
//! - [`store`]: the [`store::Store`] boundary (one atomic take over several layers), its
//!   in-process [`store::local::LocalStore`] and [`store::redis::RedisStore`] (replicas share).
//! - `layer`: one layer's buckets and FIFO queues (with `fair_by`, served in turn by fair key:
//!   `layer/waiters.rs`): timers at the exact due instant, cancel-safe; for a shared layer only the queue (its turn in front of the store); an
//!   adaptive layer's effective limit applied to its buckets (`layer/adapt.rs`).
//! - `shared_layers`: the layers on a shared store (`store = "redis"`): one store call per
//!   message, reservations, and `on_error` when the store fails.
//! - `stack`: [`Throttle`] and [`Permit`] (its own file, `stack/permit.rs`, with
//!   [`Again`]: a message upstream throttled), stacked layers taken all or nothing — the API
//!   the SMTP session uses.
//! - `setup`: [`from_config`], the throttle a configuration describes (the only TOML-aware part).
//!
//! Logs (tracing target `ratelimit`; the message is the event name, fields carry `layer`, `key`,
//! `cost` and times in milliseconds, rounded up): `ratelimit.limited` (info: `retry_after_ms`,
//! `reason` = reject | max_wait | max_queue | max_keys | tenant_throttled), `ratelimit.waiting` (debug:
//! `estimate_ms`, `position`), `ratelimit.waited` (debug: `waited_ms`), `ratelimit.evicted`
//! (warn: a bucket dropped before it was full; `remaining`, `max_keys`),
//! `ratelimit.adapted` (info: an adaptive layer's limit changed; `key`, `old_limit`, `new_limit`),
//! `ratelimit.store_unavailable` (warn, once when a shared store stops answering: `error`,
//! `on_error`), `ratelimit.store_back` (info, when it answers again) and
//! `ratelimit.give_back_failed` (warn: tokens a shared store could not take back; `error`).

pub mod adaptive;
mod blame;
pub mod bucket;
mod charge;
mod error;
mod key_table;
mod layer;
mod peek;
mod setup;
mod shared_layers;
mod spec;
mod stack;
pub mod store;

pub use crate::config::{Mode, OnError, Refill};
pub use charge::Charge;
pub use error::{LimitReason, ThrottleError};
pub use layer::KeyWaiting;
pub use peek::Peek;
pub use setup::{from_config, spec};
pub use shared_layers::{SharedLayers, StoreErrors, StoreUnreachable};
pub use spec::LayerSpec;
pub use stack::{Again, Permit, Teaches, Throttle};
