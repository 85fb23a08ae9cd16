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

/// Why a message was refused, in a few words an operator acts on: the outcome's own
/// (`Outcome::why`), or for a layer's refusal, which of its bounds refused it.
fn why(outcome: Outcome, reason: Option<LimitReason>) -> &'static str {
    match (outcome, reason) {
        (Outcome::Throttled, Some(LimitReason::MaxWait)) => "its wait would pass max_wait_ms",
        (Outcome::Throttled, Some(LimitReason::MaxQueue)) => "the key's queue is full (max_queue)",
        (Outcome::Throttled, Some(LimitReason::Reject)) => "no tokens now (mode = reject)",
        (Outcome::Throttled, Some(LimitReason::MaxKeys)) => "every bucket has waiters (max_keys)",
        (Outcome::Throttled, Some(LimitReason::MaxHeld)) => "the key holds max_held messages",
        (Outcome::Throttled, Some(LimitReason::MaxKeyShare)) => {
            "the key holds its share of the spool (max_key_share)"
        }
        _ => outcome.why(),
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
