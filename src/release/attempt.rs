//! One release attempt of a held message: read back whole (a damaged file is set aside), its
//! identity read again as at its final dot (same origin, same key, the config in force), its
//! journey run through the pipeline with nobody waiting, and what comes of it: removed once
//! upstream took it; tried again later after a temporary refusal; given up (its sender told)
//! after a permanent one or once held past `max_hold_ms`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use super::client::Unattended;
use super::dsn::{self, Failed, Failure};
use super::report::{self, Attempted, Next, Reported};
use crate::clock::nanos;
use crate::config::SpoolConfig;
use crate::message::{Envelope, Outcome};
use crate::pipeline::{self, End, Message, NotAdmitted, Paused, Unanswered, Verdict};
use crate::policy::{self, MessageFacts};
use crate::reply::Reply;
use crate::spool::{Held, Spool, Ticket, ToHold};
use crate::state::context::Context;
use crate::state::grace_over::Bell;
use crate::throttle::ThrottleError;

/// One attempt of `ticket`'s message; logged once (`report`).
pub async fn attempt(ctx: &Context, spool: &Spool, ticket: Ticket, bell: Arc<Bell>) {
    let started = Instant::now();
    let held_ms = spool.wall_ms().saturating_sub(ticket.accepted_ms);
    let mut attempted = Attempted::new(&ticket, held_ms);
    let held = match spool.read(&ticket).await {
        Ok(held) => held,
        Err(damaged) => {
            spool.set_aside(&ticket, &damaged.0).await;
            let next = Next::GaveUp(Failure::Rejected(damaged.0), Reported::Damaged);
            return report::attempt(ctx, &attempted, &next, started.elapsed());
        }
    };
    attempted.rcpts = held.meta.rcpts.len();
    if held_ms >= spool.config().max_hold_ms.get() {
        let last = spool
            .get(&ticket.id)
            .and_then(|(_, e)| e.last.map(String::from));
        let failure = Failure::Expired(last);
        let reported = give_up(ctx, spool, &ticket, &held, &failure).await;
        let next = Next::GaveUp(failure, reported);
        return report::attempt(ctx, &attempted, &next, started.elapsed());
    }
    let (verdict, read) = journey(ctx, &held, bell).await;
    let reply = pipeline::answer(&verdict.end);
    let next = match decide(&verdict, reply.as_ref(), ticket.attempt, spool.config()) {
        Decision::Done => {
            spool.remove(&ticket.id).await;
            Next::Delivered
        }
        Decision::Again(wait, answer) => {
            // Not past its time: given up then, not at the attempt after.
            let left = spool.config().max_hold_ms.get().saturating_sub(held_ms);
            let wait = wait.min(Duration::from_millis(left));
            spool.retry(&ticket, spool.clock().now() + nanos(wait), answer);
            Next::Retry(wait)
        }
        Decision::Fail(failure) => {
            let reported = give_up(ctx, spool, &ticket, &held, &failure).await;
            Next::GaveUp(failure, reported)
        }
    };
    attempted.verdict = Some(&verdict);
    attempted.reply = reply.as_ref();
    attempted.traceparent = read.traceparent.as_deref();
    attempted.tenant = Some(&read.tenant);
    attempted.envelope = Some((held.meta.from.as_deref(), &held.meta.rcpts));
    report::attempt(ctx, &attempted, &next, started.elapsed());
}

/// The held message's journey, and its identity's `traceparent` and tenant.
async fn journey(ctx: &Context, held: &Held, bell: Arc<Bell>) -> (Verdict, Read) {
    let meta = &held.meta;
    let envelope = meta.envelope();
    let body = held.keyed_body();
    let facts = MessageFacts {
        auth_tenant: meta.origin.auth_tenant.as_deref(),
        header_trusted: meta.origin.header_trusted,
        sender: envelope.from.as_deref(),
        rcpts: &envelope.rcpts,
        client_ip: meta.origin.peer.ip(),
        message: body,
        binding: None,
    };
    let mut identity = policy::identify(ctx.rules(), &facts);
    // A report's identity fields (its original's header section) are read, never sent.
    let read_only = held.key_fields_len();
    if read_only > 0 {
        identity.key_headers.retain(|r| r.start >= read_only);
        identity.key_headers.insert(0, 0..read_only);
    }
    let added = [held.received(), &identity.route_fields()].concat();
    let message = Message {
        id: &meta.id,
        envelope: &envelope,
        body,
        identity: &identity,
        added: &added,
        peer: meta.origin.peer,
    };
    let mut client = Unattended { grace_over: bell };
    let verdict = Box::pin(pipeline::deliver(ctx, &message, &mut client)).await;
    let read = Read {
        traceparent: identity.traceparent,
        tenant: identity.tenant,
    };
    (verdict, read)
}

/// What the attempt's report needs of the message's identity.
struct Read {
    traceparent: Option<String>,
    /// Its tenant (`[tenant]`), its webhooks'.
    tenant: String,
}

/// What an attempt's verdict means for the held message.
enum Decision {
    /// Upstream took it.
    Done,
    /// Not now: again after this wait, with the answer it got.
    Again(Duration, String),
    /// Refused for good.
    Fail(Failure),
}

fn decide(verdict: &Verdict, reply: Option<&Reply>, attempt: u32, spool: &SpoolConfig) -> Decision {
    let answer = reply.map_or_else(String::new, reply_text);
    match verdict.record.outcome {
        Outcome::Delivered | Outcome::Partial => return Decision::Done,
        Outcome::UpstreamPermFail if reply.is_some_and(|r| r.code >= 500) => {
            return Decision::Fail(Failure::Refused(answer))
        }
        _ if reply.is_some_and(|r| r.code >= 500) => {
            return Decision::Fail(Failure::Rejected(answer))
        }
        _ => {}
    }
    let wait = match &verdict.end {
        // Our own layers: not its turn yet, and the bucket says when it is.
        End::Unanswered(Unanswered::Refused(ThrottleError::Limited { retry_after, .. })) => {
            (*retry_after).max(Duration::from_millis(1))
        }
        end => backoff(attempt, spool).max(pushback(end)),
    };
    Decision::Again(wait, answer)
}

/// The wait before attempt `attempt + 1` after a temporary refusal: `retry_min_ms`, doubled at
/// each attempt, at most `retry_max_ms`.
pub fn backoff(attempt: u32, spool: &SpoolConfig) -> Duration {
    let min = spool.retry_min_ms.get_ref().get();
    let doubled = min.saturating_mul(1u64 << attempt.saturating_sub(1).min(32));
    Duration::from_millis(doubled.min(spool.retry_max_ms.get()))
}

/// How long upstream (or its tenant there) said it is paused, or to slow down.
fn pushback(end: &End) -> Duration {
    match end {
        End::Unanswered(Unanswered::Paused(left) | Unanswered::UpstreamRate(left)) => *left,
        End::Refused(NotAdmitted::Paused(Paused { left, .. })) => left.unwrap_or_default(),
        _ => Duration::ZERO,
    }
}

/// A reply on one line, as the message's last answer.
fn reply_text(reply: &Reply) -> String {
    let mut text = reply.code.to_string();
    if !reply.esc.is_empty() {
        text.push(' ');
        text.push_str(reply.esc);
    }
    for line in &reply.lines {
        text.push(' ');
        text.push_str(line);
    }
    text
}

/// Gives the message up: its sender gets a report (held in the spool, behind the key's other
/// messages, and sent like them), or without `report_from` it is kept in `failed/`. A report,
/// or a message from the null sender, is never reported on: it is removed.
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
    let failed = Failed {
        hostname: &ctx.setup.config.smtp.hostname,
        from: from.get_ref(),
        to: sender,
        rcpts: &held.meta.rcpts,
        original: held.body(),
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
        key_fields: crate::message::dsn::header_section(held.body()),
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
        Err(refusal) => {
            let wait = backoff(ticket.attempt, spool.config());
            let answer = format!("{failure}; its report could not be held: {refusal}");
            spool.retry(ticket, spool.clock().now() + nanos(wait), answer);
            Reported::NotHeld(wait)
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
