//! The one info line of a verdict: `message` (target `mailsluice::message`) for a session's,
//! with its outcome counted and its row among the status page's last refusals; `release`
//! (target `mailsluice::release`) for a release attempt's. Tests and operators parse both:
//! their fields stay as they are. No content, no addresses beyond the envelope's counts.

use std::net::SocketAddr;

use super::{Account, Attempt};
use crate::message::Outcome;
use crate::state::context::Context;
use crate::throttle::LimitReason;

/// The reply as the `upstream` field shows it, when it is upstream's (or the routes') word,
/// and built only for a log that is on: the one line per message is often filtered out.
fn upstream_text(account: &Account<'_>, on: bool) -> String {
    match account.upstream_reply() {
        Some(reply) if on => reply.text(),
        _ => String::new(),
    }
}

/// A session's message: counted, its status page row, its line (`rcpts`: the envelope's,
/// `suppressed`: those refused as suppressed, the others went on).
pub(super) fn message(
    ctx: &Context,
    account: &Account<'_>,
    peer: SocketAddr,
    (rcpts, suppressed): (usize, usize),
) {
    let Some(record) = account.record else {
        return;
    };
    let metrics = &ctx.services.metrics;
    metrics.message(record.outcome);
    // A layer's refusal; a held message was taken, whatever kept it from going now.
    if record.limited.is_some() && record.outcome == Outcome::Throttled {
        metrics.throttled(&record.layer);
    }
    let layer = record.refusing_layer();
    let code = account.reply.map(|r| r.code);
    let recent = &ctx.services.recent;
    recent.message(record.outcome, layer, &record.key, code, record.limited);
    let on = tracing::enabled!(target: "mailsluice::message", tracing::Level::INFO);
    let upstream = upstream_text(account, on);
    tracing::info!(
        target: "mailsluice::message",
        outcome = record.outcome.as_str(),
        // As `str`, not `%`: the key comes from a client's header, and even tracing's
        // default text format quotes a `str` value, so it cannot forge fields.
        layer,
        key = record.key.as_str(),
        reason = record.limited.map_or("", LimitReason::as_str),
        code = code.unwrap_or(0),
        cost = record.cost,
        waited_ms = record.waited.as_millis() as u64,
        duration_ms = account.took.as_millis() as u64,
        rcpts,
        suppressed,
        upstream = upstream.as_str(),
        via = record.via.as_str(),
        peer = %peer,
        // The relay's id of the message (a held one's: its spool id, `queued as`).
        id = account.journey.as_ref().map_or("", |j| j.judged.id.as_str()),
        "message"
    );
}

/// A release attempt's line: the held message's id, key, age and attempt number, what its
/// journey came to, and what comes next.
pub(super) fn release(account: &Account<'_>, a: &Attempt<'_>) {
    let ticket = a.ticket;
    let record = account.record;
    let on = tracing::enabled!(target: "mailsluice::release", tracing::Level::INFO);
    let upstream = upstream_text(account, on);
    tracing::info!(
        target: "mailsluice::release",
        id = &*ticket.id,
        layer = ticket.key.layer.as_str(),
        key = ticket.key.key.as_str(),
        attempt = ticket.attempt,
        held_ms = a.held_ms,
        outcome = record.map_or(a.outcome_without_journey, |r| r.outcome.as_str()),
        waited_ms = record.map_or(0, |r| r.waited.as_millis() as u64),
        duration_ms = account.took.as_millis() as u64,
        rcpts = a.rcpts,
        upstream = upstream.as_str(),
        via = record.map_or("", |r| r.via.as_str()),
        next = a.next,
        retry_in_ms = a.retry_in.map_or(0, |d| d.as_millis() as u64),
        "release"
    );
}
