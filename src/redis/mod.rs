//! Redis as every part of the relay that keeps state there reaches it: the throttle's shared
//! layers and the reputation guard. Each keeps its own scripts and keys; here is only what they
//! share.
//!
//! - `options`: [`RedisOptions`] (one server, a cluster or Sentinel), made from `[redis]` by
//!   [`redis_options`].
//! - `connection`: a connection made on first use, each call within the timeout, that follows
//!   the primary through a failover.
//! - `error`: [`RedisUnavailable`], a call that did not answer.
//! - `outage`: [`Outage`], the store left alone for a while after a call failed.

mod connection;
mod error;
mod options;
mod outage;

pub(crate) use connection::{Call, Connection};
pub use error::RedisUnavailable;
pub use options::{redis_options, RedisOptions, SentinelOptions};
pub use outage::{Outage, RETRY};
