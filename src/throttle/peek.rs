//! The allowance of one bucket as an operator sees it (`GET /buckets/{layer}/{key}`). Apart
//! because the local layers, the stores and the throttle all answer it.

use super::bucket::{Bucket, State};
use crate::clock::{Clock, Nanos};

/// The allowance of one bucket, taking nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Peek {
    /// The capacity: `burst`, or `limit` for a fixed window.
    pub limit: u64,
    pub remaining: u64,
    /// Unix seconds when an active fixed window refills; 0 otherwise.
    pub reset: u64,
    /// Messages waiting for this bucket.
    pub waiting: usize,
    /// An adaptive layer's limit in force now (what upstream's throttle replies taught it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_limit: Option<u64>,
}

/// The allowance of a bucket in `state` at `now` (`waiting` is 0: the caller knows its queue).
pub(crate) fn peek_of(b: &Bucket, st: State, now: Nanos, clock: &dyn Clock) -> Peek {
    Peek {
        limit: b.capacity(),
        remaining: b.remaining(st, now),
        reset: b.reset_at(st, now).map_or(0, |at| clock.unix_secs_at(at)),
        waiting: 0,
        effective_limit: None,
    }
}
