//! What one message came to: how its journey ended (typed), and the record for its log line
//! and the metrics. The pipeline's steps return it; whoever drives the pipeline answers it
//! (`answer`: the SMTP reply) and logs it once.

use std::time::Duration;

use super::admission::NotAdmitted;
use crate::message::Outcome;
use crate::spool::Refusal;
use crate::state::context::Context;
use crate::throttle::{Charge, LimitReason, ThrottleError};
use crate::upstream::{self, Accepted, UpstreamError};

/// What one message came to, for its log line and the metrics.
pub struct Record {
    pub outcome: Outcome,
    /// The layer and key that decided a refusal, or the first charge of a granted message.
    pub layer: String,
    pub key: String,
    pub cost: u64,
    pub waited: Duration,
    /// The upstream that carried it (or would have): its route's, or the fallback's.
    pub via: String,
    /// A layer's bucket refused it (counted per layer), and which of its bounds did.
    pub limited: Option<LimitReason>,
    /// Upstream's id of the message it took (`250 Ok <id>`), for the reputation guard.
    pub upstream_id: Option<String>,
    /// Upstream refused it for good for a bad mailbox (`5.1.x`): a bounce the relay saw.
    pub hard_bounce: bool,
    /// Of a message taken for some recipients only, those refused for good for a bad mailbox.
    pub bounced: Vec<String>,
}

impl Record {
    /// The record of a message refused with `outcome` before it had an identity (at MAIL,
    /// at DATA, for its size or content): no layer, no key, no cost.
    pub fn refused(outcome: Outcome) -> Record {
        Record {
            outcome,
            layer: String::new(),
            key: String::new(),
            cost: 0,
            waited: Duration::ZERO,
            via: String::new(),
            limited: None,
            upstream_id: None,
            hard_bounce: false,
            bounced: Vec::new(),
        }
    }

    /// The layer to name for it: the one that refused it, else none (a pause, a loop or
    /// upstream's word is no layer's doing).
    pub fn refusing_layer(&self) -> &str {
        match self.outcome.by_layer() {
            true => &self.layer,
            false => "",
        }
    }

    /// The record of a message charged `charges`, before anything happened to it.
    pub fn new(ctx: &Context, charges: &[Charge]) -> Record {
        let first = charges.first();
        Record {
            outcome: Outcome::Delivered,
            layer: first.map_or_else(String::new, |c| ctx.setup.layers[c.layer].name.clone()),
            key: first.map_or_else(String::new, |c| c.key.clone()),
            cost: first.map_or(0, |c| c.cost),
            waited: Duration::ZERO,
            via: String::new(),
            limited: None,
            upstream_id: None,
            hard_bounce: false,
            bounced: Vec::new(),
        }
    }
}

/// Why a message got no verdict from upstream.
pub enum Unanswered {
    /// The client closed the connection while the message waited.
    Abandoned,
    /// Upstream is paused after its quota reply: the time left of the pause.
    Paused(Duration),
    /// Upstream throttled the message and its wait to go again ran past its budget.
    UpstreamRate(Duration),
    /// The throttle refused it.
    Refused(ThrottleError),
    /// The shutdown's grace ended while it was with upstream: it may have arrived.
    GraceOver,
    /// A held message's upstream is failing (its breaker is open) and another message is its
    /// probe: it did not try; the time until the next probe may go.
    UpstreamFailing(Duration),
}

/// How one message's journey ended.
pub enum End {
    /// Upstream's answer, or why there was none.
    Upstream(Result<Accepted, UpstreamError>),
    /// Routes are configured and none is for this message: the client keeps it.
    NoRoute,
    /// Refused before it waited (a loop, a pause): nothing of it went.
    Refused(NotAdmitted),
    /// It never reached an upstream's answer.
    Unanswered(Unanswered),
    /// Its driver held it in the spool instead (hold mode): on stable storage, with this id.
    Held(String),
    /// Its driver could not hold it: the key's `max_held` (the layer's `451`, with the time
    /// until the key's next message is released as the hint), or the spool's storage.
    NotHeld {
        layer: String,
        refusal: Refusal,
        retry_after: Duration,
    },
}

/// The end of one message's journey.
pub struct Verdict {
    pub end: End,
    pub record: Record,
}

impl Verdict {
    /// Upstream's answer (or the lack of one).
    pub fn upstream(result: Result<Accepted, UpstreamError>, mut record: Record) -> Verdict {
        record.outcome = upstream::outcome(&result);
        record.upstream_id = (result.as_ref().ok())
            .and_then(Accepted::message_id)
            .map(str::to_string);
        record.hard_bounce = (result.as_ref().err()).is_some_and(UpstreamError::is_hard_bounce);
        record.bounced = (result.as_ref().ok()).map_or_else(Vec::new, |a| a.bounced.clone());
        Verdict {
            end: End::Upstream(result),
            record,
        }
    }

    /// Routes are configured and none is for this message.
    pub fn no_route(mut record: Record) -> Verdict {
        record.outcome = Outcome::NoRoute;
        Verdict {
            end: End::NoRoute,
            record,
        }
    }

    /// Refused before the wait: a loop (refused for good), or a pause.
    pub fn refused(refusal: NotAdmitted, mut record: Record) -> Verdict {
        record.outcome = refusal.outcome();
        if let Some(key) = refusal.key() {
            // The key the refusal is about (the reputation guard's tenant), no layer's.
            record.key = key.to_string();
        }
        Verdict {
            end: End::Refused(refusal),
            record,
        }
    }

    /// A message that never reached an upstream's answer.
    pub fn unanswered(unanswered: Unanswered, mut record: Record) -> Verdict {
        record.outcome = match &unanswered {
            Unanswered::Abandoned => Outcome::Abandoned,
            Unanswered::Paused(_) => Outcome::UpstreamPaused,
            Unanswered::UpstreamRate(_) => Outcome::UpstreamThrottled,
            Unanswered::Refused(error) => refused(error, &mut record),
            Unanswered::GraceOver => Outcome::Shutdown,
            Unanswered::UpstreamFailing(_) => Outcome::UpstreamUnavailable,
        };
        Verdict {
            end: End::Unanswered(unanswered),
            record,
        }
    }

    /// Held in the spool as `id` (its record's layer and key: where it waits).
    pub fn held(id: String, mut record: Record) -> Verdict {
        record.outcome = Outcome::Held;
        Verdict {
            end: End::Held(id),
            record,
        }
    }

    /// To be held, but refused by the spool.
    pub fn not_held(refusal: Refusal, retry_after: Duration, mut record: Record) -> Verdict {
        record.outcome = match refusal {
            Refusal::KeyFull { .. } | Refusal::OverShare { .. } => Outcome::Throttled,
            Refusal::Storage(_) => Outcome::SpoolFull,
        };
        record.limited = match refusal {
            Refusal::KeyFull { .. } => Some(LimitReason::MaxHeld),
            Refusal::OverShare { .. } => Some(LimitReason::MaxKeyShare),
            Refusal::Storage(_) => None,
        };
        let layer = record.layer.clone();
        Verdict {
            end: End::NotHeld {
                layer,
                refusal,
                retry_after,
            },
            record,
        }
    }

    /// Whether upstream's failure, not the message, kept it back: upstream could not be
    /// tried, or it failed for now (not its refusal for good, nor its word about our pace or
    /// one of its tenants).
    pub fn upstream_failed(&self) -> bool {
        match &self.end {
            End::Unanswered(Unanswered::UpstreamFailing(_)) => true,
            End::Upstream(Err(error)) => {
                !error.for_good()
                    && !matches!(
                        error,
                        UpstreamError::Pushback { .. } | UpstreamError::TenantPaused(_)
                    )
            }
            _ => false,
        }
    }

    /// The session ends after the answer: the client left, or the relay is shutting down.
    pub fn closes(&self) -> bool {
        matches!(self.record.outcome, Outcome::Abandoned | Outcome::Shutdown)
    }

    /// Whether the answer is upstream's (or the routes') word on the message, for the log
    /// line's `upstream` field; the relay's own refusals leave that field empty.
    pub fn upstreams_word(&self) -> bool {
        self.record.outcome.upstreams_word()
    }
}

/// The outcome of a refusal by the throttle; the layer and key that decided it recorded.
fn refused(error: &ThrottleError, record: &mut Record) -> Outcome {
    match error {
        ThrottleError::Limited {
            layer, key, reason, ..
        } => {
            (record.layer, record.key) = (layer.clone(), key.clone());
            record.limited = Some(*reason);
            Outcome::Throttled
        }
        ThrottleError::CostOverBurst { layer, .. } => {
            record.layer = layer.clone();
            Outcome::CostOverBurst
        }
        ThrottleError::Shutdown => Outcome::Shutdown,
        ThrottleError::StoreUnavailable => Outcome::StoreUnavailable,
    }
}
