//! What the guard reports: the warn line of a tenant's change of standing, a tenant's
//! standing as the admin endpoint shows it, what an event counts, and dates as replies say them.

use super::events::{Event, Kind};
use super::ledger::{Breach, Change, Counts};
use super::Standing;
use crate::config::Action;

/// What one bounce or complaint event counts: one per recipient (at least one).
pub(super) fn event_counts(event: &Event) -> Counts {
    let n = event.recipients.len().max(1) as u64;
    match event.kind {
        Kind::Bounce => Counts {
            bounces: n,
            ..Counts::default()
        },
        Kind::Complaint => Counts {
            complaints: n,
            ..Counts::default()
        },
    }
}

pub(super) fn standing_of(key: String, c: Counts, breach: Option<Breach>) -> Standing {
    let rate = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    Standing {
        key,
        sent: c.sent,
        bounces: c.bounces,
        complaints: c.complaints,
        bounce_rate: rate(c.bounces, c.sent),
        complaint_rate: rate(c.complaints, c.sent),
        paused: breach.is_some(),
    }
}

pub(super) fn log_change(key: &str, change: Change, breach: Option<&Breach>, action: Action) {
    let action = match action {
        Action::Pause => "pause",
        Action::Reject => "reject",
        Action::Warn => "warn",
        Action::Hold => "hold",
    };
    match (change, breach) {
        (Change::Paused, Some(b)) => tracing::warn!(
            target: "mailsluice::reputation",
            tenant = key,
            kind = b.kind.as_str(),
            rate = b.rate,
            sent = b.sent,
            limit = b.limit,
            action,
            "reputation.paused"
        ),
        (Change::Resumed, _) => tracing::warn!(
            target: "mailsluice::reputation",
            tenant = key,
            action,
            "reputation.resumed: the rate fell back under the limit"
        ),
        _ => {}
    }
}

pub use crate::clock::date_of;
