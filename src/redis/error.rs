//! A Redis call that did not answer. Every user of Redis (the throttle's shared layers, the
//! reputation guard) fails the same ways, so it says so once; each decides what a failure
//! means for it (`on_error`, failing open).
//!
//! Each text starts with `store unavailable:`, as logs, the admin endpoint and the event
//! sources have always said it.

use std::time::Duration;

/// Why a Redis call did not answer.
#[derive(Debug, thiserror::Error)]
pub enum RedisUnavailable {
    /// The options make no client (a bad URL, several URLs without `cluster = true`): found
    /// when the connection is made, before any call.
    #[error("store unavailable: {0}")]
    Options(String),
    /// Redis answered an error (`READONLY` from a demoted primary, a script's error), or the
    /// connection failed.
    #[error("store unavailable: {0}")]
    Failed(#[from] ::redis::RedisError),
    /// The sentinels did not say where the primary is, and no connection was in use.
    #[error("store unavailable: asking the sentinels: {0}")]
    Sentinels(::redis::RedisError),
    /// No answer within `timeout`, connecting included.
    #[error("store unavailable: no answer within {0:?}")]
    Timeout(Duration),
    /// A call its caller did not make, or whose failure it already counted and logged: the
    /// reputation guard, failing open, leaves Redis alone for a while after a failure.
    #[error("store unavailable: Redis did not answer")]
    Unanswered,
}
