//! Why a message may not go: the one error of the throttle, which the SMTP session turns into
//! a reply. Apart because every part of the engine refuses with it.

use std::time::Duration;

/// Why a message may not go.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThrottleError {
    /// Retryable: `451 4.7.1 ... retry after`.
    #[error("rate limited by layer {layer} for key {key}; retry after {retry_after:?}")]
    Limited {
        layer: String,
        key: String,
        retry_after: Duration,
        reason: LimitReason,
    },
    /// Permanent: no bucket of the layer could ever hold the cost (`554 5.5.3`).
    #[error("cost {cost} exceeds the burst {burst} of layer {layer}")]
    CostOverBurst {
        layer: String,
        cost: u64,
        burst: u64,
    },
    /// The throttle was disposed of (`421 4.3.2`).
    #[error("the throttle is shutting down")]
    Shutdown,
    /// A shared layer's store cannot answer and its `on_error` is `reject` (`451 4.4.3`).
    #[error("the shared rate-limit store is unavailable")]
    StoreUnavailable,
}

/// Which bound of a layer refused a message, for the log and the status page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitReason {
    /// `mode = "reject"` and no tokens now.
    Reject,
    /// Its wait would pass `max_wait_ms`.
    MaxWait,
    /// The key's queue is full (`max_queue`).
    MaxQueue,
    /// The layer holds `max_keys` buckets, none of which can go.
    MaxKeys,
    /// Upstream throttled this key and its learned wait is past the message's budget.
    TenantThrottled,
    /// Hold mode: the key already holds `max_held` messages in the spool.
    MaxHeld,
    /// Hold mode: the key holds its share of the spool (`[spool] max_key_share`).
    MaxKeyShare,
}

impl LimitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitReason::Reject => "reject",
            LimitReason::MaxWait => "max_wait",
            LimitReason::MaxQueue => "max_queue",
            LimitReason::MaxKeys => "max_keys",
            LimitReason::TenantThrottled => "tenant_throttled",
            LimitReason::MaxHeld => "max_held",
            LimitReason::MaxKeyShare => "max_key_share",
        }
    }
}
