//! The tenant reputation guard before the wait: a tenant past a bounce or complaint limit is
//! paused (`451 4.7.1`), or refused for good with `action = "reject"` (`550 5.7.1`), until its
//! rates fall or an operator resumes it. Asked at MAIL too, when the key is known by then
//! (`smtp/reputation.rs`, with the same words); with `action = "hold"` its driver holds the
//! message instead.

use std::net::SocketAddr;
use std::time::Duration;

use super::{Message, NotAdmitted, Paused, Scope};
use crate::config::Action;
use crate::message::Outcome;
use crate::reply::Reply;
use crate::reputation::{Breach, Reputation};
use crate::state::context::Context;

pub(super) const OUTCOME: Outcome = Outcome::ReputationPaused;

/// Go, or the pause of the message's tenant.
pub(super) async fn check(ctx: &Context, message: &Message<'_>) -> Result<(), NotAdmitted> {
    let (Some(guard), Some(key)) = (&ctx.services.reputation, &message.identity.reputation_key)
    else {
        return Ok(());
    };
    reputation(guard, key, "DATA", message.peer)
        .await
        .map_err(NotAdmitted::Paused)
}

/// Whether the reputation guard lets `key` send now (asked at MAIL too, when the key is known
/// by then; `at` says where, for the log line). Logs a refusal.
pub async fn reputation(
    guard: &Reputation,
    key: &str,
    at: &'static str,
    peer: SocketAddr,
) -> Result<(), Paused> {
    let Some(breach) = guard.standing(key).await else {
        return Ok(());
    };
    let reject = match guard.action {
        Action::Warn => return Ok(()),
        // A hold-mode message is held instead by its driver (it knows of the spool).
        Action::Pause | Action::Hold => false,
        Action::Reject => true,
    };
    tracing::info!(
        target: "mailsluice::reputation",
        tenant = key,
        at,
        peer = %peer,
        "reputation.refused"
    );
    Err(Paused {
        scope: Scope::Tenant {
            key: key.to_string(),
            breach,
            reject,
        },
        left: None,
    })
}

/// A tenant past a reputation limit: `451 4.7.1` (pause), or `550 5.7.1` (reject), with the
/// rate, the messages it is of, the window and the limit.
pub(super) fn reply(key: &str, breach: &Breach, reject: bool) -> Reply {
    let (code, esc) = if reject {
        (550, "5.7.1")
    } else {
        (451, "4.7.1")
    };
    let kind = breach.kind.as_str();
    Reply::new(
        code,
        esc,
        format!(
            "Tenant {key} paused: {kind} rate {} % of {} messages over {} (limit {} %)",
            percent(breach.rate),
            breach.sent,
            window_text(breach.window),
            percent(breach.limit)
        ),
    )
}

/// A rate as a percentage with one decimal (`15.0`), more when one would hide it (`0.05`).
fn percent(rate: f64) -> String {
    let p = rate * 100.0;
    if (p * 10.0 - (p * 10.0).round()).abs() < 1e-9 || p >= 1.0 {
        return format!("{p:.1}");
    }
    let text = format!("{p:.3}");
    text.trim_end_matches('0').to_string()
}

/// `24 h`, `90 min`, `30 s`, `1500 ms`: the largest whole unit.
fn window_text(window: Duration) -> String {
    let ms = window.as_millis();
    match ms {
        _ if ms.is_multiple_of(3_600_000) => format!("{} h", ms / 3_600_000),
        _ if ms.is_multiple_of(60_000) => format!("{} min", ms / 60_000),
        _ if ms.is_multiple_of(1000) => format!("{} s", ms / 1000),
        _ => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reputation::Kind;

    fn wire(r: &Reply) -> String {
        let mut out = Vec::new();
        r.write_to(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn reputation_replies_are_as_pinned() {
        let breach = Breach {
            kind: Kind::Bounce,
            rate: 6.0 / 40.0,
            sent: 40,
            limit: 0.05,
            window: Duration::from_millis(86_400_000),
        };
        assert_eq!(
            wire(&reply("acme", &breach, false)),
            "451 4.7.1 Tenant acme paused: bounce rate 15.0 % of 40 messages over 24 h (limit 5.0 %)\r\n"
        );
        let complaint = Breach {
            kind: Kind::Complaint,
            rate: 2.0 / 1000.0,
            sent: 1000,
            limit: 0.0005,
            window: Duration::from_secs(90 * 60),
        };
        assert_eq!(
            wire(&reply("b", &complaint, true)),
            "550 5.7.1 Tenant b paused: complaint rate 0.2 % of 1000 messages over 90 min (limit 0.05 %)\r\n"
        );
    }
}
