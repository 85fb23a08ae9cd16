//! One release attempt of a held message: read back whole (a damaged file is set aside),
//! handed to the pipeline's intake as at its final dot (same origin, same bytes, the config in
//! force) with nobody waiting, and what its verdict's fate (`pipeline::Fate`) makes of it:
//! removed once upstream took it; tried again later after a temporary refusal; given up (its
//! sender told) after a permanent one or once held past `max_hold_ms`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::client::Unattended;
use super::dsn::{self, Failed, Failure};
use super::report::{self, Attempted, Next, Reported};
use super::turns::Turn;
use crate::clock::nanos;
use crate::config::SpoolConfig;
use crate::message::Envelope;
use crate::pipeline::{self, Fate, Intake, Judged, Later, Received, Refuser, Submitter};
use crate::policy;
use crate::reply::Reply;
use crate::spool::{Held, Spool, Ticket, ToHold, Unread};
use crate::state::context::Context;
use crate::state::grace_over::Bell;

/// One attempt of `ticket`'s message, taking its tokens at its `turn` in its key's order;
/// accounted for once (`report`, `crate::pipeline::account`).
pub async fn attempt(ctx: &Context, spool: &Spool, ticket: Ticket, bell: Arc<Bell>, turn: Turn) {
    let started = Instant::now();
    let held_ms = spool.wall_ms().saturating_sub(ticket.accepted_ms);
    let mut attempted = Attempted::new(&ticket, held_ms);
    let held = match spool.read(&ticket).await {
        Ok(held) => held,
        Err(Unread::Damaged(damaged)) => {
            spool.set_aside(&ticket, &damaged.0).await;
            let next = Next::GaveUp(Failure::Rejected(damaged.0), Reported::Damaged);
            return report::attempt(ctx, &attempted, &next, started.elapsed());
        }
        // Never answered `250` or removed by an operator: dropped by the spool, not an attempt.
        Err(Unread::Gone) => return,
        Err(unavailable @ Unread::Unavailable(_)) => {
            let wait = backoff(ticket.attempt, spool.config());
            let at = spool.clock().now() + nanos(wait);
            spool.retry(&ticket, at, unavailable.to_string()).await;
            return report::attempt(ctx, &attempted, &Next::Retry(wait), started.elapsed());
        }
    };
    attempted.rcpts = held.meta.rcpts.len();
    if held_ms >= spool.config().max_hold_ms.get_ref().get() {
        let last = spool
            .get(&ticket.id)
            .and_then(|(_, e)| e.last.map(String::from));
        let failure = Failure::Expired(last);
        let reported = give_up(ctx, spool, &ticket, &held, &failure).await;
        let next = Next::GaveUp(failure, reported);
        return report::attempt(ctx, &attempted, &next, started.elapsed());
    }
    let envelope = held.meta.envelope();
    let judged = journey(ctx, &held, &envelope, bell, turn).await;
    // The route's concurrency: how many of the key's messages may be out at once.
    if let Some(upstream) = ctx.setup.upstreams.get(&judged.verdict.record.via) {
        spool.set_width(&ticket.key, upstream.config.pool_size.get());
    }
    let reply = pipeline::answer(&judged.verdict.end);
    // The message's last answer, as its report and the operators see it.
    let answer = || reply.as_ref().map_or_else(String::new, Reply::text);
    let next = match Fate::of(&judged.verdict) {
        Fate::Taken => {
            spool.remove(&ticket.id).await;
            Next::Delivered
        }
        Fate::NotNow(later) => {
            let wait = match later {
                // Our own layers: not its turn yet, and the bucket says when it is.
                Later::Turn(wait) => wait,
                Later::NotBefore(wait) => backoff(ticket.attempt, spool.config()).max(wait),
                // Not its failure: the next start, or another replica, takes it at once.
                Later::Stopping => Duration::ZERO,
            };
            // Not past its time: given up then, not at the attempt after.
            let left = spool
                .config()
                .max_hold_ms
                .get_ref()
                .get()
                .saturating_sub(held_ms);
            let wait = wait.min(Duration::from_millis(left));
            let at = spool.clock().now() + nanos(wait);
            match failing_upstream(ctx, &judged) {
                Some(upstream) => (spool.wait_for_upstream(&ticket, at, answer(), upstream)).await,
                None => spool.retry(&ticket, at, answer()).await,
            }
            Next::Retry(wait)
        }
        Fate::RefusedForGood(refuser) => {
            let failure = match refuser {
                Refuser::Upstream => Failure::Refused(answer()),
                Refuser::Relay => Failure::Rejected(answer()),
            };
            let reported = give_up(ctx, spool, &ticket, &held, &failure).await;
            Next::GaveUp(failure, reported)
        }
    };
    attempted.journey = Some((&judged, &envelope));
    attempted.reply = reply.as_ref();
    report::attempt(ctx, &attempted, &next, started.elapsed());
}

/// The upstream whose failure, not the message, kept it back: it goes again as soon as that
/// upstream answers (its breaker closes), whatever its backoff.
fn failing_upstream<'a>(ctx: &'a Context, judged: &Judged) -> Option<&'a str> {
    let upstream = ctx.setup.upstreams.get(&judged.verdict.record.via)?;
    let failing = judged.verdict.upstream_failed() && upstream.breaker.is_open();
    failing.then(|| upstream.name())
}

/// The held message's journey, read again as at its final dot: the same origin and bytes,
/// the config in force.
async fn journey(
    ctx: &Context,
    held: &Held,
    envelope: &Envelope,
    bell: Arc<Bell>,
    turn: Turn,
) -> Judged {
    let intake = Intake {
        envelope,
        body: held.keyed_body(),
        key_fields: held.key_fields_len(),
        submitter: Submitter::held(&held.meta.origin),
        received: Received::Held {
            id: &held.meta.id,
            field: held.received(),
        },
        can_hold: false,
    };
    let mut client = Unattended {
        grace_over: bell,
        turn,
    };
    Box::pin(pipeline::intake(ctx, intake, &mut client)).await
}

/// The wait before attempt `attempt + 1` after a temporary refusal: `retry_min_ms`, doubled at
/// each attempt, at most `retry_max_ms`.
pub fn backoff(attempt: u32, spool: &SpoolConfig) -> Duration {
    let min = spool.retry_min_ms.get_ref().get();
    let doubled = min.saturating_mul(1u64 << attempt.saturating_sub(1).min(32));
    Duration::from_millis(doubled.min(spool.retry_max_ms.get()))
}

/// Gives the message up: its sender gets a report (held in the spool, behind the key's other
/// messages, and sent like them), or without `report_from`, or when the report cannot be held,
/// it is kept in `failed/`. A report, or a message from the null sender, is never reported on:
/// it is removed. The report copies the original's header section but its key fields (which
/// it is held with, read only for its identity).
async fn give_up(
    ctx: &Context,
    spool: &Spool,
    ticket: &Ticket,
    held: &Held,
    failure: &Failure,
) -> Reported {
    let (Some(sender), false) = (held.meta.from.as_deref(), held.meta.report) else {
        spool.remove(&ticket.id).await;
        return Reported::Never;
    };
    let Some(from) = spool.config().report_from.as_ref() else {
        spool.fail(ticket, failure.to_string()).await;
        return Reported::KeptFailed;
    };
    let id = crate::message::new_id();
    let section = crate::message::dsn::header_section(held.body());
    let (copied, key_fields) =
        dsn::split_original(section, &policy::key_fields(ctx.rules(), section));
    let failed = Failed {
        hostname: &ctx.setup.config.smtp.hostname,
        from: from.get_ref(),
        to: sender,
        rcpts: &held.meta.rcpts,
        original: &copied,
        id: &ticket.id,
        arrival: UNIX_EPOCH + Duration::from_millis(ticket.accepted_ms),
        failure,
    };
    let bytes = dsn::report(&failed, SystemTime::now());
    let envelope = Envelope {
        from: None,
        rcpts: vec![sender.to_string()],
        smtputf8: held.meta.smtputf8,
        body_8bit: !bytes.is_ascii(),
    };
    let report = ToHold {
        id: &id,
        key: ticket.key.clone(),
        envelope: &envelope,
        origin: held.meta.origin.clone(),
        received: b"",
        key_fields: &key_fields,
        body: &bytes,
        max_held: None,
        report: true,
    };
    match spool.hold(report).await {
        Ok(()) => {
            ctx.services.metrics.spool().held(true);
            spool.remove(&ticket.id).await;
            Reported::Report(id)
        }
        // Given up all the same: kept for the operator, never sent again.
        Err(refusal) => {
            let answer = format!("{failure}; its report could not be held: {refusal}");
            spool.fail(ticket, answer).await;
            Reported::NotHeld(refusal.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spool(min: u64, max: u64) -> SpoolConfig {
        toml::from_str(&format!(
            "dir = \"s\"\nretry_min_ms = {min}\nretry_max_ms = {max}\n"
        ))
        .unwrap()
    }

    #[test]
    fn backoff_doubles_from_min_to_max() {
        let s = spool(1000, 5000);
        let waits: Vec<u64> = (1..=5).map(|a| backoff(a, &s).as_millis() as u64).collect();
        assert_eq!(waits, [1000, 2000, 4000, 5000, 5000]);
        assert_eq!(backoff(200, &s), Duration::from_millis(5000));
    }
}
