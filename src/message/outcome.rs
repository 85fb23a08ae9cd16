//! What became of one message: counted by `observe::metrics`, listed by `observe::recent`,
//! logged once by whoever answered it. One outcome per cause an operator acts on differently:
//! a layer's refusal is never mixed with a pause, a loop or upstream's word. What the relay
//! says of each (its name, whether a layer decided it, whether it went, whether the answer is
//! upstream's word, why it was refused) is one row of one table, `TABLE`, or, for an
//! outcome an admission step declares in its own file, that step's one row
//! ([`Outcome::Step`]). `Outcome::ALL`, every outcome in the order docs/operating.md lists
//! them, is in `pipeline/admission/outcomes.rs`: only the pipeline knows its steps.

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
    /// An admission step's own refusal, its facts declared in the step's file: a new step
    /// adds no variant here.
    Step(&'static OutcomeFacts),
}

/// What the relay records of one outcome: a row of [`TABLE`], or a step's own.
#[derive(Debug, PartialEq, Eq)]
pub struct OutcomeFacts {
    /// Its name in the log line, the metrics and docs/operating.md.
    name: &'static str,
    /// [`LAYER`], [`WENT`], [`UPSTREAMS`], or none.
    marks: u8,
    /// Why a message was refused, in a few words an operator acts on (the status page's
    /// last refusals); empty for what is no refusal.
    why: &'static str,
}

impl OutcomeFacts {
    /// A refusal by the relay itself: no layer decided it, nothing went, the answer is not
    /// upstream's word. What an admission step's own outcome is.
    pub const fn refusal(name: &'static str, why: &'static str) -> OutcomeFacts {
        OutcomeFacts {
            name,
            marks: 0,
            why,
        }
    }
}

/// One row of [`TABLE`]: an outcome of the relay's own and its facts.
struct Row {
    outcome: Outcome,
    facts: OutcomeFacts,
}

/// A throttle layer decided it (or, in hold mode, holds it or could not): only then do the
/// log line and the status page name a layer (a pause or upstream's word is no layer's doing).
const LAYER: u8 = 1;
/// The message went (`250`).
const WENT: u8 = 2;
/// The answer is upstream's (or the routes') word on the message, for the log line's
/// `upstream` field; the relay's own refusals leave that field empty.
const UPSTREAMS: u8 = 4;

const fn row(outcome: Outcome, name: &'static str, marks: u8, why: &'static str) -> Row {
    let facts = OutcomeFacts { name, marks, why };
    Row { outcome, facts }
}

/// The facts of every outcome of the relay's own, in the order docs/operating.md lists them:
/// the one place to add one (with its variant above). An admission step's own outcome is its
/// step's instead ([`Outcome::Step`]).
#[rustfmt::skip]
const TABLE: [Row; 28] = [
    row(Outcome::Delivered, "delivered", WENT | UPSTREAMS, ""),
    row(Outcome::Partial, "partial", WENT | UPSTREAMS, ""),
    row(Outcome::Throttled, "throttled", LAYER, "upstream throttled this key past its wait"),
    row(Outcome::CostOverBurst, "cost_over_burst", LAYER, "its cost is above the layer's burst"),
    row(Outcome::TooBig, "too_big", 0, "message too big (max_message_bytes)"),
    row(Outcome::ContentRejected, "content_rejected", 0, "its content: a bare CR or LF, a NUL, a long line"),
    row(Outcome::InsufficientStorage, "insufficient_storage", 0, "the relay's DATA buffers are full"),
    row(Outcome::Suppressed, "suppressed", 0, "every recipient refused, some suppressed"),
    row(Outcome::NoRecipients, "no_recipients", 0, "no recipient accepted"),
    row(Outcome::Loop, "loop", 0, "a mail loop"),
    row(Outcome::SenderRefused, "sender_refused", 0, "a From: address outside the user's senders"),
    row(Outcome::IdentityRefused, "identity_refused", 0, "the sender is no identity of its SES tenant"),
    row(Outcome::UpstreamTenantUnknown, "upstream_tenant_unknown", 0, "its SES tenant is unknown to SES"),
    row(Outcome::ReputationPaused, "reputation_paused", 0, "tenant paused by the reputation guard"),
    row(Outcome::UpstreamTenantPaused, "upstream_tenant_paused", UPSTREAMS, "upstream paused the tenant (SES)"),
    row(Outcome::UpstreamPaused, "upstream_paused", 0, "upstream paused: quota exhausted"),
    row(Outcome::UpstreamThrottled, "upstream_throttled", 0, "upstream kept throttling it"),
    row(Outcome::UpstreamTempFail, "upstream_temp_fail", UPSTREAMS, "upstream refused it for now"),
    row(Outcome::UpstreamPermFail, "upstream_perm_fail", UPSTREAMS, "upstream refused it"),
    row(Outcome::UpstreamUnavailable, "upstream_unavailable", UPSTREAMS, "upstream unreachable"),
    row(Outcome::UpstreamUncertain, "upstream_uncertain", UPSTREAMS, "no answer from upstream after sending"),
    row(Outcome::UpstreamCredentials, "upstream_credentials", UPSTREAMS, "upstream credentials missing or refused"),
    row(Outcome::Abandoned, "abandoned", 0, ""),
    row(Outcome::Shutdown, "shutdown", 0, "the relay is shutting down"),
    row(Outcome::StoreUnavailable, "store_unavailable", 0, "Redis unavailable (on_error = reject)"),
    row(Outcome::NoRoute, "no_route", UPSTREAMS, "no route matches"),
    row(Outcome::Held, "held", LAYER, ""),
    row(Outcome::SpoolFull, "spool_full", LAYER, "the spool is full or cannot be written"),
];

impl Outcome {
    /// The relay's own outcomes, the table's, in its order: `Outcome::ALL` adds the admission
    /// steps' own.
    pub const CORE: [Outcome; TABLE.len()] = {
        let mut core = [Outcome::Delivered; TABLE.len()];
        let mut i = 0;
        while i < TABLE.len() {
            core[i] = TABLE[i].outcome;
            i += 1;
        }
        core
    };

    fn facts(self) -> &'static OutcomeFacts {
        match self {
            Outcome::Step(facts) => facts,
            // A few dozen rows, each compared by its variant's number alone.
            own => match TABLE.iter().find(|row| row.outcome == own) {
                Some(row) => &row.facts,
                None => unreachable!("every outcome of the relay's own has its row: {own:?}"),
            },
        }
    }

    pub fn as_str(self) -> &'static str {
        self.facts().name
    }

    /// Whether a throttle layer decided it (or, in hold mode, holds it or could not): only then
    /// do the log line and the status page name a layer (a pause or upstream's word is no
    /// layer's doing).
    pub fn by_layer(self) -> bool {
        self.facts().marks & LAYER != 0
    }

    /// Whether the message went (`250`).
    pub fn delivered(self) -> bool {
        self.facts().marks & WENT != 0
    }

    /// Whether the answer is upstream's (or the routes') word on the message, for the log
    /// line's `upstream` field; the relay's own refusals leave that field empty.
    pub fn upstreams_word(self) -> bool {
        self.facts().marks & UPSTREAMS != 0
    }

    /// Why a message was refused, in a few words an operator acts on; empty for a message
    /// that went, was held, or whose client left.
    pub fn why(self) -> &'static str {
        self.facts().why
    }
}

#[cfg(test)]
mod tests {
    use super::{Outcome, OutcomeFacts};

    #[test]
    fn every_outcome_of_the_relays_own_is_listed_once_with_a_name_of_its_own() {
        let names: std::collections::BTreeSet<_> =
            Outcome::CORE.iter().map(|o| o.as_str()).collect();
        assert_eq!(names.len(), Outcome::CORE.len());
        assert!(names
            .iter()
            .all(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
    }

    #[test]
    fn a_steps_outcome_is_read_from_its_own_row() {
        const FACTS: OutcomeFacts = OutcomeFacts::refusal("a_step", "a step refused it");
        let outcome = Outcome::Step(&FACTS);
        assert_eq!(outcome.as_str(), "a_step");
        assert_eq!(outcome.why(), "a step refused it");
        assert!(!outcome.by_layer() && !outcome.delivered() && !outcome.upstreams_word());
        assert_eq!(outcome, Outcome::Step(&FACTS));
        assert_ne!(outcome, Outcome::Loop);
    }
}
