//! What became of one message: counted by `observe::metrics`, listed by `observe::recent`,
//! logged once by whoever answered it. One outcome per cause an operator acts on differently:
//! a layer's refusal is never mixed with a pause, a loop or upstream's word.

/// What became of a message the relay answered: at MAIL (its tenant paused by the reputation
/// guard), at DATA (no recipient left), after its data (its size or content), or at its final
/// dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// `250`, but some recipients' domains refused it after its end (the sender gets a report).
    Partial,
    /// `451 4.7.1 Rate limit of layer ...`: over a layer's bounds.
    Throttled,
    /// `554 5.5.3`: its cost is above a layer's burst; it can never pass.
    CostOverBurst,
    /// `552 5.3.4`: past `max_message_bytes`.
    TooBig,
    /// `550 5.6.0` (a bare CR or LF, a NUL, a leading continuation line) or `500 5.5.2` (a line
    /// past `max_line_bytes`): refused for its content.
    ContentRejected,
    /// `452 4.3.1`: the relay's DATA buffers (`max_buffered_bytes`) were full.
    InsufficientStorage,
    /// `554 5.5.1` at DATA: every RCPT was refused, at least one as suppressed.
    Suppressed,
    /// `554 5.5.1` at DATA: no recipient was accepted (none suppressed).
    NoRecipients,
    /// `554 5.4.6`: a mail loop, or more hops than `max_received`.
    Loop,
    /// `550 5.7.1 From: ... not allowed for user`: an address of its `From:` is outside the
    /// AUTH user's `senders`.
    SenderRefused,
    /// `550 5.7.1 ... is not a sending identity of SES tenant`: its sender is none of the
    /// identities SES associates with the route's tenant.
    IdentityRefused,
    /// `451 4.3.5 SES tenant ... unknown to SES`: the route's SES tenant does not exist there.
    UpstreamTenantUnknown,
    /// Its tenant is past a limit of the reputation guard (`451 4.7.1`, `550 5.7.1` with
    /// `action = "reject"`).
    ReputationPaused,
    /// Upstream paused the tenant it is sent as (SES's tenant: `451 4.7.1`).
    UpstreamTenantPaused,
    /// Upstream is paused after a quota reply, or its account's sending is paused (`451 4.7.1
    /// Upstream sending quota exhausted`).
    UpstreamPaused,
    /// Upstream kept throttling it until its wait budget ran out (`451 4.7.1 Upstream rate
    /// limit reached`).
    UpstreamThrottled,
    UpstreamTempFail,
    UpstreamPermFail,
    /// `451 4.4.1`: no answer from upstream.
    UpstreamUnavailable,
    /// `451 4.4.1`: the message was sent, upstream's answer never came (it may have been
    /// delivered: a retry by the client may duplicate it).
    UpstreamUncertain,
    /// `451 4.7.0`: upstream refused the relay's credentials, or the relay has none to give.
    UpstreamCredentials,
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
    /// Every outcome, in the order docs/operating.md lists them.
    pub const ALL: [Outcome; 28] = [
        Outcome::Delivered,
        Outcome::Partial,
        Outcome::Throttled,
        Outcome::CostOverBurst,
        Outcome::TooBig,
        Outcome::ContentRejected,
        Outcome::InsufficientStorage,
        Outcome::Suppressed,
        Outcome::NoRecipients,
        Outcome::Loop,
        Outcome::SenderRefused,
        Outcome::IdentityRefused,
        Outcome::UpstreamTenantUnknown,
        Outcome::ReputationPaused,
        Outcome::UpstreamTenantPaused,
        Outcome::UpstreamPaused,
        Outcome::UpstreamThrottled,
        Outcome::UpstreamTempFail,
        Outcome::UpstreamPermFail,
        Outcome::UpstreamUnavailable,
        Outcome::UpstreamUncertain,
        Outcome::UpstreamCredentials,
        Outcome::Abandoned,
        Outcome::Shutdown,
        Outcome::StoreUnavailable,
        Outcome::NoRoute,
        Outcome::Held,
        Outcome::SpoolFull,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Partial => "partial",
            Outcome::Throttled => "throttled",
            Outcome::CostOverBurst => "cost_over_burst",
            Outcome::TooBig => "too_big",
            Outcome::ContentRejected => "content_rejected",
            Outcome::InsufficientStorage => "insufficient_storage",
            Outcome::Suppressed => "suppressed",
            Outcome::NoRecipients => "no_recipients",
            Outcome::Loop => "loop",
            Outcome::SenderRefused => "sender_refused",
            Outcome::IdentityRefused => "identity_refused",
            Outcome::UpstreamTenantUnknown => "upstream_tenant_unknown",
            Outcome::ReputationPaused => "reputation_paused",
            Outcome::UpstreamTenantPaused => "upstream_tenant_paused",
            Outcome::UpstreamPaused => "upstream_paused",
            Outcome::UpstreamThrottled => "upstream_throttled",
            Outcome::UpstreamTempFail => "upstream_temp_fail",
            Outcome::UpstreamPermFail => "upstream_perm_fail",
            Outcome::UpstreamUnavailable => "upstream_unavailable",
            Outcome::UpstreamUncertain => "upstream_uncertain",
            Outcome::UpstreamCredentials => "upstream_credentials",
            Outcome::Abandoned => "abandoned",
            Outcome::Shutdown => "shutdown",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::NoRoute => "no_route",
            Outcome::Held => "held",
            Outcome::SpoolFull => "spool_full",
        }
    }

    /// Whether a throttle layer decided it (or, in hold mode, holds it or could not): only then
    /// do the log line and the status page name a layer (a pause or upstream's word is no
    /// layer's doing).
    pub fn by_layer(self) -> bool {
        matches!(
            self,
            Outcome::Throttled | Outcome::CostOverBurst | Outcome::Held | Outcome::SpoolFull
        )
    }

    /// Whether the message went (`250`).
    pub fn delivered(self) -> bool {
        matches!(self, Outcome::Delivered | Outcome::Partial)
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    #[test]
    fn every_outcome_is_listed_once_with_a_name_of_its_own() {
        let names: std::collections::BTreeSet<_> =
            Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(names.len(), Outcome::ALL.len());
        assert!(names
            .iter()
            .all(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    }
}
