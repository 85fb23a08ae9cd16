//! What the client is told of its message's journey: the verdict's end in SMTP words. An
//! admission step's refusal is in that step's words (`admission/`); the texts shared with the
//! session's dialogue are `crate::reply`'s.

use super::verdict::{End, Unanswered};
use crate::reply::{
    grace_over, held, insufficient_storage, no_route, rate_limited, throttle_refusal,
    upstream_quota_exhausted, upstream_rate_limited, upstream_unavailable, upstream_verdict, Reply,
};
use crate::spool::Refusal;

/// The reply to a journey that ended as `end`; nothing when the client left.
pub fn answer(end: &End) -> Option<Reply> {
    Some(match end {
        End::Upstream(result) => upstream_verdict(result),
        End::NoRoute => no_route(),
        End::Refused(refusal) => refusal.reply(),
        End::Unanswered(Unanswered::Abandoned) => return None,
        End::Unanswered(Unanswered::Paused(left)) => upstream_quota_exhausted(*left),
        End::Unanswered(Unanswered::UpstreamRate(retry_after)) => {
            upstream_rate_limited(*retry_after)
        }
        End::Unanswered(Unanswered::Refused(error)) => throttle_refusal(error),
        End::Unanswered(Unanswered::GraceOver) => grace_over(),
        End::Unanswered(Unanswered::UpstreamFailing(_)) => upstream_unavailable(),
        End::Held(id) => held(id),
        End::NotHeld {
            refusal: Refusal::KeyFull { .. } | Refusal::OverShare { .. },
            layer,
            retry_after,
        } => rate_limited(layer, *retry_after),
        End::NotHeld {
            refusal: Refusal::Storage(_),
            ..
        } => insufficient_storage(),
    })
}
