//! What became of one message: counted by `observe::metrics`, listed by `observe::recent`,
//! decided by the session at the final dot.

/// What became of a message that reached its final dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// `250`, but some recipients' domains refused it after its end (the sender gets a report).
    Partial,
    /// `451 4.7.1`: over a layer's bounds.
    Throttled,
    /// Refused by the relay itself: cost over burst, size, bare CR/LF, line length.
    Rejected,
    UpstreamTempFail,
    UpstreamPermFail,
    /// `451 4.4.1`: no answer from upstream.
    UpstreamUnavailable,
    /// `451 4.4.1`: the message was sent, upstream's answer never came (it may have been
    /// delivered: a retry by the client may duplicate it).
    UpstreamUncertain,
    /// The client left while it waited in a queue.
    Abandoned,
    /// The relay shut down while the message waited (`421`).
    Shutdown,
    /// The shared store failed and `on_error = "reject"` refused the message.
    StoreUnavailable,
    /// `451 4.3.5`: routes are configured and none matched.
    NoRoute,
    /// `250`: written to the spool (hold mode), to be released at its layer's rate.
    Held,
    /// `452 4.3.1`: to be held, but the spool had no room or could not be written.
    SpoolFull,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Partial => "partial",
            Outcome::Throttled => "throttled",
            Outcome::Rejected => "rejected",
            Outcome::UpstreamTempFail => "upstream_temp_fail",
            Outcome::UpstreamPermFail => "upstream_perm_fail",
            Outcome::UpstreamUnavailable => "upstream_unavailable",
            Outcome::UpstreamUncertain => "upstream_uncertain",
            Outcome::Abandoned => "abandoned",
            Outcome::Shutdown => "shutdown",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::NoRoute => "no_route",
            Outcome::Held => "held",
            Outcome::SpoolFull => "spool_full",
        }
    }
}
