//! The throttle engine: token buckets per key, FIFO queues in front of them, stacked layers.
//!
//! Why it is a module of its own, with no SMTP in it: it is the part whose mistakes cost money
//! or mail (going over a provider's quota, or losing a client's message to a wrong refusal),
//! so it is built to be tested exhaustively with a fake or paused clock and never a sleep.
//!
//! - [`clock`]: monotonic integer time, injected (`TokioClock`, `FakeClock`).
//! - [`bucket`]: the pure math of the three refill modes (drip, fixed window, lifetime).
//! - [`store`]: where bucket state lives: the in-process table with its `max_keys` eviction, the
//!   [`store::Store`] boundary, and [`store::redis::RedisStore`] (buckets shared by replicas).
//! - `queue`: FIFO waiters per key, timers at the exact due instant, cancel-safe.
//! - `layers`: [`Throttle`], stacked layers taken all or nothing — the API the SMTP session uses.
//! - `shared`: the layers on a shared store (`store = "redis"`): a per-key FIFO gate in front
//!   of one store call per message, reservations, and `on_error` when the store fails.
//! - `setup`: [`from_config`], the throttle a configuration describes.
//!
//! Logs (tracing target `ratelimit`; the message is the event name, fields carry `layer`, `key`,
//! `cost` and times in milliseconds, rounded up): `ratelimit.limited` (info: `retry_after_ms`,
//! `reason` = reject | max_wait | max_queue | max_keys), `ratelimit.waiting` (debug:
//! `estimate_ms`, `position`), `ratelimit.waited` (debug: `waited_ms`), `ratelimit.evicted`
//! (warn: a bucket dropped before it was full; `remaining`, `max_keys`),
//! `ratelimit.store_unavailable` (warn, once when a shared store stops answering: `error`,
//! `on_error`) and `ratelimit.store_back` (info, when it answers again).

pub mod bucket;
pub mod clock;
mod layers;
mod queue;
mod setup;
mod shared;
pub mod store;

pub use bucket::Refill;
pub use clock::{Clock, FakeClock, Nanos, TokioClock};
pub use layers::{Charge, LayerSpec, Peek, Permit, Throttle, ThrottleError};
pub use queue::Mode;
pub use setup::{from_config, redis_options, spec};
pub use shared::{OnError, SharedLayers};
