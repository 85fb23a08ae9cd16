//! The reputation guard's replies: a paused tenant, a suppressed recipient.

use std::time::Duration;

use super::Reply;
use crate::reputation::{Breach, Suppression};

/// A tenant past a reputation limit: `451 4.7.1` (pause), or `550 5.7.1` (reject), with the
/// rate, the messages it is of, the window and the limit.
pub fn tenant_paused(key: &str, breach: &Breach, reject: bool) -> Reply {
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

/// A recipient that hard-bounced or complained, refused for every tenant.
pub fn suppressed(address: &str, suppression: &Suppression) -> Reply {
    Reply::new(
        550,
        "5.1.1",
        format!(
            "<{address}> suppressed: {} on {}",
            suppression.reason_text(),
            suppression.date
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
