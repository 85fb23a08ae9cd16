//! How the pipeline's verdicts become the client's reply: a throttle refusal, upstream's
//! answer (its class kept, its text passed on), a pause, a loop.

use super::{
    cost_over_burst, from_not_allowed, grace_over, held, identity_refused, insufficient_storage,
    loop_detected, no_route, rate_limited, shutting_down, store_unavailable, tenant_paused,
    too_many_hops, upstream_credentials, upstream_no_credentials, upstream_quota_exhausted,
    upstream_rate_limited, upstream_unavailable, upstream_uncertain, Reply,
};
use crate::message::received::Loop;
use crate::pipeline::{End, NotAdmitted, Paused, Scope, Unanswered};
use crate::spool::Refusal;
use crate::throttle::ThrottleError;
use crate::upstream::reply::split_enhanced;
use crate::upstream::{Accepted, UpstreamError};

/// A message the throttle would not let go.
pub fn throttle_refusal(error: &ThrottleError) -> Reply {
    match error {
        ThrottleError::Limited {
            layer, retry_after, ..
        } => rate_limited(layer, *retry_after),
        ThrottleError::CostOverBurst { layer, cost, burst } => {
            cost_over_burst(layer, *cost, *burst)
        }
        ThrottleError::Shutdown => shutting_down(),
        ThrottleError::StoreUnavailable => store_unavailable(),
    }
}

/// Upstream's answer as the client sees it: the class is kept and upstream's text passed on,
/// printable ASCII only (see [`printable`]). A 421 becomes 451: from us, 421 would tell the
/// client that *this* connection is closing.
pub fn upstream_verdict(result: &Result<Accepted, UpstreamError>) -> Reply {
    match result {
        Ok(accepted) => {
            let text = printable(accepted.text.trim());
            match split_enhanced(&text) {
                Some(_) => Reply::raw(250, text),
                None => Reply::new(250, "2.0.0", text),
            }
        }
        Err(UpstreamError::Unavailable(_)) => upstream_unavailable(),
        Err(UpstreamError::Uncertain(_)) => upstream_uncertain(),
        Err(UpstreamError::Credentials(_)) => upstream_credentials(),
        Err(UpstreamError::NoCredentials(_)) => upstream_no_credentials(),
        Err(refused) => {
            let (code, enhanced, text) = refused.reply().expect("a refusal has a reply");
            let code = match code {
                421 => 451,
                c @ 400..=599 => c,
                _ => 451,
            };
            let (found, rest) = match split_enhanced(text) {
                Some((esc, rest)) => (Some(esc), rest),
                None => (None, text.trim()),
            };
            let default = if code >= 500 { "5.0.0" } else { "4.0.0" };
            let esc = enhanced.or(found).unwrap_or(default);
            // Upstream's enhanced code must agree with the (possibly remapped) class.
            let esc = format!("{}{}", code / 100, esc.get(1..).unwrap_or(".0.0"));
            Reply::raw(code, format!("{esc} upstream: {}", printable(rest)))
        }
    }
}

/// Upstream's text (an SMTP reply's, SES's error text or MessageId) as the relay passes it
/// on: printable ASCII, every other character `?` (a tab a space). Upstream is any host for
/// `mx://`, and an escape sequence or a NUL in a reply would reach the client's terminal and
/// logs as it is.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ' '..='~' => c,
            '\t' => ' ',
            _ => '?',
        })
        .collect()
}

/// What the client is told of its message's journey; nothing when it left.
pub fn verdict(end: &End) -> Option<Reply> {
    Some(match end {
        End::Upstream(result) => upstream_verdict(result),
        End::NoRoute => no_route(),
        End::Refused(NotAdmitted::Loop(Loop::CameBack)) => loop_detected(),
        End::Refused(NotAdmitted::Loop(Loop::TooManyHops)) => too_many_hops(),
        End::Refused(NotAdmitted::From { address, user }) => from_not_allowed(address, user),
        End::Refused(NotAdmitted::Identity(refusal)) => identity_refused(refusal),
        End::Refused(NotAdmitted::Paused(paused)) => paused_reply(paused),
        End::Unanswered(Unanswered::Abandoned) => return None,
        End::Unanswered(Unanswered::Paused(left)) => upstream_quota_exhausted(*left),
        End::Unanswered(Unanswered::UpstreamRate(retry_after)) => {
            upstream_rate_limited(*retry_after)
        }
        End::Unanswered(Unanswered::Refused(error)) => throttle_refusal(error),
        End::Unanswered(Unanswered::GraceOver) => grace_over(),
        End::Held(id) => held(id),
        End::NotHeld {
            refusal: Refusal::KeyFull { .. },
            layer,
            retry_after,
        } => rate_limited(layer, *retry_after),
        End::NotHeld {
            refusal: Refusal::Storage(_),
            ..
        } => insufficient_storage(),
    })
}

/// A pause that holds a message back, by whom it holds.
pub fn paused_reply(paused: &Paused) -> Reply {
    match &paused.scope {
        Scope::Upstream => upstream_quota_exhausted(paused.left.unwrap_or_default()),
        Scope::UpstreamTenant(error) => upstream_verdict(&Err(error.clone())),
        Scope::Tenant {
            key,
            breach,
            reject,
        } => tenant_paused(key, breach, *reject),
    }
}
