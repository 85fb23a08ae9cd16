//! The last refusals, each with why it happened in words an operator acts on.

use std::fmt::Write as _;

use super::text::escape;
use crate::message::Outcome;
use crate::observe::recent::Recent;
use crate::throttle::LimitReason;

/// The last refusals, newest first: time, outcome, why, the layer when a layer refused, key,
/// reply code.
pub(super) fn refusals(html: &mut String, recent: &Recent) {
    html.push_str(
        "<h2>Last refusals</h2><table><tr><th>time (UTC)</th><th>outcome</th><th>why</th>\
         <th>layer</th><th>key</th><th class=\"num\">reply</th></tr>",
    );
    let refusals = recent.refusals();
    for r in &refusals {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"any\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            escape(&httpdate::fmt_http_date(r.at)),
            r.outcome.as_str(),
            why(r.outcome, r.reason),
            escape(&r.layer),
            escape(&r.key),
            r.code,
        );
    }
    if refusals.is_empty() {
        html.push_str("<tr><td colspan=\"6\">none since start</td></tr>");
    }
    html.push_str("</table>");
}

/// Why a message was refused, in a few words an operator acts on.
fn why(outcome: Outcome, reason: Option<LimitReason>) -> &'static str {
    match (outcome, reason) {
        (Outcome::Throttled, Some(LimitReason::MaxWait)) => "its wait would pass max_wait_ms",
        (Outcome::Throttled, Some(LimitReason::MaxQueue)) => "the key's queue is full (max_queue)",
        (Outcome::Throttled, Some(LimitReason::Reject)) => "no tokens now (mode = reject)",
        (Outcome::Throttled, Some(LimitReason::MaxKeys)) => "every bucket has waiters (max_keys)",
        (Outcome::Throttled, Some(LimitReason::MaxHeld)) => "the key holds max_held messages",
        (Outcome::Throttled, Some(LimitReason::TenantThrottled) | None) => {
            "upstream throttled this key past its wait"
        }
        (Outcome::CostOverBurst, _) => "its cost is above the layer's burst",
        (Outcome::TooBig, _) => "message too big (max_message_bytes)",
        (Outcome::ContentRejected, _) => "its content: a bare CR or LF, a NUL, a long line",
        (Outcome::InsufficientStorage, _) => "the relay's DATA buffers are full",
        (Outcome::Suppressed, _) => "every recipient refused, some suppressed",
        (Outcome::NoRecipients, _) => "no recipient accepted",
        (Outcome::Loop, _) => "a mail loop",
        (Outcome::SenderRefused, _) => "a From: address outside the user's senders",
        (Outcome::IdentityRefused, _) => "the sender is no identity of its SES tenant",
        (Outcome::UpstreamTenantUnknown, _) => "its SES tenant is unknown to SES",
        (Outcome::ReputationPaused, _) => "tenant paused by the reputation guard",
        (Outcome::UpstreamTenantPaused, _) => "upstream paused the tenant (SES)",
        (Outcome::UpstreamPaused, _) => "upstream paused: quota exhausted",
        (Outcome::UpstreamThrottled, _) => "upstream kept throttling it",
        (Outcome::UpstreamTempFail, _) => "upstream refused it for now",
        (Outcome::UpstreamPermFail, _) => "upstream refused it",
        (Outcome::UpstreamUnavailable, _) => "upstream unreachable",
        (Outcome::UpstreamUncertain, _) => "no answer from upstream after sending",
        (Outcome::UpstreamCredentials, _) => "upstream credentials missing or refused",
        (Outcome::Shutdown, _) => "the relay is shutting down",
        (Outcome::StoreUnavailable, _) => "Redis unavailable (on_error = reject)",
        (Outcome::NoRoute, _) => "no route matches",
        (Outcome::SpoolFull, _) => "the spool is full or cannot be written",
        (Outcome::Delivered | Outcome::Partial | Outcome::Abandoned | Outcome::Held, _) => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_says_why() {
        for outcome in Outcome::ALL {
            let said = why(outcome, None);
            assert_eq!(
                said.is_empty(),
                outcome.delivered() || matches!(outcome, Outcome::Abandoned | Outcome::Held),
                "{outcome:?}"
            );
        }
        assert_ne!(
            why(Outcome::Throttled, Some(LimitReason::MaxWait)),
            why(Outcome::Throttled, Some(LimitReason::MaxQueue))
        );
    }
}
