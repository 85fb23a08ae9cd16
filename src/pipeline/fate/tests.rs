//! Every way a journey can end, and its fate: what a driver that keeps the message does next.

use std::time::Duration;

use super::{Fate, Later, Refuser};
use crate::message::received::Loop;
use crate::message::Outcome;
use crate::pipeline::admission::StepRefusal;
use crate::pipeline::answer::answer;
use crate::pipeline::verdict::{End, Record, Unanswered, Verdict};
use crate::pipeline::{NotAdmitted, Paused, Scope};
use crate::reply::Reply;
use crate::reputation::{Breach, Kind};
use crate::throttle::{LimitReason, ThrottleError};
use crate::upstream::{Accepted, Feedback, IdentityRefusal, UpstreamError};

/// What a verdict means for a held message, read as the client would read its reply:
/// upstream's `250` taken; a `5xx` refused for good (upstream's when its outcome says
/// so); anything else not now, when the bucket says for our own layers, else after the
/// backoff or the pause (at once when the relay stops).
fn by_the_reply(verdict: &Verdict) -> Fate {
    let code = answer(&verdict.end).map_or(0, |r| r.code);
    match verdict.record.outcome {
        Outcome::Delivered | Outcome::Partial => return Fate::Taken,
        Outcome::UpstreamPermFail if code >= 500 => return Fate::RefusedForGood(Refuser::Upstream),
        _ if code >= 500 => return Fate::RefusedForGood(Refuser::Relay),
        _ => {}
    }
    let left = match &verdict.end {
        End::Unanswered(Unanswered::Refused(ThrottleError::Limited { retry_after, .. })) => {
            return Fate::NotNow(Later::Turn((*retry_after).max(Duration::from_millis(1))))
        }
        End::Unanswered(Unanswered::Refused(ThrottleError::Shutdown) | Unanswered::GraceOver) => {
            return Fate::NotNow(Later::Stopping)
        }
        End::Unanswered(Unanswered::Paused(left) | Unanswered::UpstreamRate(left)) => *left,
        End::Refused(NotAdmitted::Paused(Paused { left, .. })) => left.unwrap_or_default(),
        _ => Duration::ZERO,
    };
    Fate::NotNow(Later::NotBefore(left))
}

fn rejected(code: u16, enhanced: &str) -> UpstreamError {
    UpstreamError::Rejected {
        code,
        enhanced: Some(enhanced.into()),
        text: "no".into(),
    }
}

fn pushback(feedback: Feedback, code: u16) -> UpstreamError {
    UpstreamError::Pushback {
        feedback,
        code,
        enhanced: None,
        text: "slow down".into(),
    }
}

fn paused(scope: Scope, left: Option<Duration>) -> NotAdmitted {
    NotAdmitted::Paused(Paused { scope, left })
}

fn tenant(reject: bool) -> Scope {
    let breach = Breach {
        kind: Kind::Bounce,
        rate: 0.1,
        sent: 100,
        limit: 0.05,
        window: Duration::from_secs(3600),
    };
    Scope::Tenant {
        key: "acme".into(),
        breach,
        reject,
    }
}

/// Every way a journey can end: its fate is what its reply's class said, case by case.
#[test]
fn a_verdicts_fate_is_what_its_reply_says() {
    let record = || Record::refused(Outcome::Delivered);
    let secs = Duration::from_secs;
    let mut partial = Accepted::new("250 2.0.0 Ok");
    partial.partial = true;
    let upstream = [
        Ok(Accepted::new("250 2.0.0 Ok")),
        Ok(partial),
        Err(rejected(550, "5.1.1")),
        Err(rejected(554, "5.7.1")),
        Err(rejected(450, "4.2.0")),
        Err(rejected(421, "4.3.2")),
        Err(rejected(600, "5.0.0")),
        Err(pushback(Feedback::Rate, 454)),
        Err(pushback(Feedback::Quota, 554)),
        Err(pushback(Feedback::Paused, 451)),
        Err(UpstreamError::Unavailable("down".into())),
        Err(UpstreamError::Uncertain("lost".into())),
        Err(UpstreamError::Credentials("no".into())),
        Err(UpstreamError::NoCredentials("none".into())),
        Err(UpstreamError::TenantPaused("paused".into())),
    ];
    let mut verdicts: Vec<Verdict> = (upstream.into_iter())
        .map(|result| Verdict::upstream(result, record()))
        .collect();
    verdicts.push(Verdict::no_route(record()));
    let refusals = [
        NotAdmitted::Loop(Loop::CameBack),
        NotAdmitted::Loop(Loop::TooManyHops),
        // As the `from` step refuses a `From:` outside the user's `senders`.
        NotAdmitted::Step(Box::new(StepRefusal {
            outcome: Outcome::SenderRefused,
            reply: Reply::new(550, "5.7.1", "From: <a@b.example> not allowed for user app"),
            key: None,
            again: None,
            holdable: false,
        })),
        NotAdmitted::Identity(IdentityRefusal::NotIdentity {
            domain: "b.example".into(),
            tenant: "t".into(),
        }),
        NotAdmitted::Identity(IdentityRefusal::UnknownTenant { tenant: "t".into() }),
        paused(Scope::Upstream, Some(secs(5))),
        paused(Scope::Upstream, None),
        paused(Scope::UpstreamTenant(rejected(554, "5.7.1")), Some(secs(3))),
        paused(
            Scope::UpstreamTenant(UpstreamError::TenantPaused("p".into())),
            None,
        ),
        paused(tenant(false), Some(secs(9))),
        paused(tenant(true), None),
    ];
    verdicts.extend(refusals.map(|r| Verdict::refused(r, record())));
    let limited = |retry_after| ThrottleError::Limited {
        layer: "tenant".into(),
        key: "acme".into(),
        retry_after,
        reason: LimitReason::MaxWait,
    };
    let unanswered = [
        Unanswered::Abandoned,
        Unanswered::Paused(secs(7)),
        Unanswered::UpstreamRate(secs(2)),
        Unanswered::Refused(limited(secs(4))),
        Unanswered::Refused(limited(Duration::ZERO)),
        Unanswered::Refused(ThrottleError::CostOverBurst {
            layer: "tenant".into(),
            cost: 9,
            burst: 3,
        }),
        Unanswered::Refused(ThrottleError::Shutdown),
        Unanswered::Refused(ThrottleError::StoreUnavailable),
        Unanswered::GraceOver,
    ];
    verdicts.extend(unanswered.map(|u| Verdict::unanswered(u, record())));
    let fates: Vec<Fate> = verdicts.iter().map(Fate::of).collect();
    let expected: Vec<Fate> = verdicts.iter().map(by_the_reply).collect();
    assert_eq!(fates, expected);
    let count = |f: fn(&Fate) -> bool| fates.iter().filter(|x| f(x)).count();
    assert_eq!(count(|f| matches!(f, Fate::Taken)), 2);
    assert_eq!(
        count(|f| matches!(f, Fate::RefusedForGood(Refuser::Upstream))),
        2
    );
    assert_eq!(
        count(|f| matches!(f, Fate::RefusedForGood(Refuser::Relay))),
        8
    );
}
