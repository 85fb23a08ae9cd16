//! What a verdict means for a message its driver keeps until it goes (the spool's release):
//! upstream took it; not now, and when it may go again; or refused for good, by upstream or by
//! the relay. Read from how the journey ended, as the reply's class has it (a `5xx` is for
//! good; anything but upstream's acceptance otherwise is not now), never from the reply.

use std::time::Duration;

use super::admission::{NotAdmitted, Paused, Scope};
use super::verdict::{End, Unanswered, Verdict};
use crate::message::Outcome;
use crate::throttle::ThrottleError;
use crate::upstream::IdentityRefusal;

/// What comes of a message by its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Upstream took it (for all its recipients, or some).
    Taken,
    /// Not now: it may go later.
    NotNow(Later),
    /// Refused for good.
    RefusedForGood(Refuser),
}

/// When a message refused for now may go again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Later {
    /// Its turn at a layer of ours: the bucket says when it comes.
    Turn(Duration),
    /// Not before this (upstream's pause or slow-down, a pause's time left; zero when nobody
    /// said): the driver's own backoff applies past it.
    NotBefore(Duration),
    /// The relay stops (its shutdown, its grace's end) before the message's turn: it goes
    /// again at once, at the next start or (with a shared spool) on another replica.
    Stopping,
}

/// Who refused a message for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refuser {
    /// Upstream's own refusal of the message (its `5xx`).
    Upstream,
    /// The relay's (a loop, a `From:` outside the user's `senders`, a cost no bucket can hold,
    /// a tenant rejected), or upstream's `5xx` about our sending rather than the message.
    Relay,
}

impl Fate {
    pub fn of(verdict: &Verdict) -> Fate {
        let later = |wait| Fate::NotNow(Later::NotBefore(wait));
        let relay = Fate::RefusedForGood(Refuser::Relay);
        match &verdict.end {
            End::Upstream(Ok(_)) => Fate::Taken,
            End::Upstream(Err(error)) if error.for_good() => match verdict.record.outcome {
                Outcome::UpstreamPermFail => Fate::RefusedForGood(Refuser::Upstream),
                _ => relay,
            },
            End::Upstream(Err(_)) | End::NoRoute => later(Duration::ZERO),
            End::Refused(refusal) => match refusal {
                NotAdmitted::Loop(_) => relay,
                NotAdmitted::Identity(IdentityRefusal::NotIdentity { .. }) => relay,
                // The tenant must be created at upstream first.
                NotAdmitted::Identity(IdentityRefusal::UnknownTenant { .. }) => {
                    later(Duration::ZERO)
                }
                NotAdmitted::Paused(Paused { scope, left }) => match scope {
                    Scope::Tenant { reject: true, .. } => relay,
                    Scope::UpstreamTenant(error) if error.for_good() => relay,
                    _ => later(left.unwrap_or_default()),
                },
                NotAdmitted::Step(refusal) => refusal.again.map_or(relay, later),
            },
            End::Unanswered(unanswered) => match unanswered {
                Unanswered::Refused(ThrottleError::Limited { retry_after, .. }) => {
                    Fate::NotNow(Later::Turn((*retry_after).max(Duration::from_millis(1))))
                }
                Unanswered::Refused(ThrottleError::CostOverBurst { .. }) => relay,
                Unanswered::Paused(left)
                | Unanswered::UpstreamRate(left)
                | Unanswered::UpstreamFailing(left) => later(*left),
                Unanswered::Refused(ThrottleError::Shutdown) | Unanswered::GraceOver => {
                    Fate::NotNow(Later::Stopping)
                }
                Unanswered::Refused(ThrottleError::StoreUnavailable) | Unanswered::Abandoned => {
                    later(Duration::ZERO)
                }
            },
            // Only a driver that can hold meets these; a release cannot.
            End::Held(_) | End::NotHeld { .. } => later(Duration::ZERO),
        }
    }
}

#[cfg(test)]
mod tests;
