//! What the relay records of one release attempt: one log line (`release`, with the held
//! message's id, key, age and attempt number, and what comes next), its result and any
//! give-up counted, and its spans as a live message's.

use std::time::{Duration, SystemTime};

use super::dsn::Failure;
use crate::observe::traces::MessageSpans;
use crate::pipeline::Verdict;
use crate::reply::Reply;
use crate::spool::Ticket;
use crate::state::context::Context;
use crate::webhook::event::EventType;

/// One attempt: its message, and its journey's verdict and reply when it had one.
pub struct Attempted<'a> {
    pub ticket: &'a Ticket,
    pub held_ms: u64,
    pub rcpts: usize,
    pub verdict: Option<&'a Verdict>,
    pub reply: Option<&'a Reply>,
    pub traceparent: Option<&'a str>,
    /// Its tenant, for its webhooks (`released`).
    pub tenant: Option<&'a str>,
    /// Its envelope's sender and recipients, when its file was read.
    pub envelope: Option<(Option<&'a str>, &'a [String])>,
}

impl<'a> Attempted<'a> {
    pub fn new(ticket: &'a Ticket, held_ms: u64) -> Attempted<'a> {
        Attempted {
            ticket,
            held_ms,
            rcpts: 0,
            verdict: None,
            reply: None,
            traceparent: None,
            tenant: None,
            envelope: None,
        }
    }
}

/// What comes of an attempt.
pub enum Next {
    /// Upstream took it: removed from the spool.
    Delivered,
    /// Held still; tried again after this wait.
    Retry(Duration),
    /// Given up, and what became of its report.
    GaveUp(Failure, Reported),
}

/// What became of a given-up message's report.
pub enum Reported {
    /// Held in the spool with this id, to be sent like any message of its key.
    Report(String),
    /// No `report_from`: the message is kept in `failed/`.
    KeptFailed,
    /// A report or a message of the null sender: never reported on; removed.
    Never,
    /// The report could not be held: the message stays and is given up again after the wait.
    NotHeld(Duration),
    /// Its file could not be read back: set aside in `damaged/`.
    Damaged,
}

impl Next {
    fn result(&self) -> &'static str {
        match self {
            Next::Delivered => "delivered",
            Next::Retry(_) | Next::GaveUp(_, Reported::NotHeld(_)) => "retry",
            Next::GaveUp(..) => "given_up",
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Next::Delivered => "removed",
            Next::Retry(_) => "retry",
            Next::GaveUp(_, Reported::Report(_)) => "reported",
            Next::GaveUp(_, Reported::KeptFailed) => "kept_failed",
            Next::GaveUp(_, Reported::Never) => "removed_unreported",
            Next::GaveUp(_, Reported::NotHeld(_)) => "report_not_held",
            Next::GaveUp(_, Reported::Damaged) => "set_aside",
        }
    }

    fn retry_in(&self) -> Option<Duration> {
        match self {
            Next::Retry(wait) | Next::GaveUp(_, Reported::NotHeld(wait)) => Some(*wait),
            _ => None,
        }
    }
}

/// One info line per attempt, its result counted, a give-up warned of and counted by reason,
/// and its spans when `[telemetry]` is on.
pub fn attempt(ctx: &Context, a: &Attempted<'_>, next: &Next, took: Duration) {
    let metrics = ctx.services.metrics.spool();
    metrics.released(next.result());
    let ticket = a.ticket;
    if let Next::GaveUp(failure, reported) = next {
        let reason = match reported {
            Reported::Damaged => "damaged",
            _ => failure.as_str(),
        };
        if !matches!(reported, Reported::NotHeld(_)) {
            metrics.given_up(reason);
        }
        tracing::warn!(
            target: "mailsluice::release",
            id = &*ticket.id,
            layer = ticket.key.layer.as_str(),
            key = ticket.key.key.as_str(),
            reason,
            error = %failure,
            next = next.name(),
            report = match reported { Reported::Report(id) => id.as_str(), _ => "" },
            "spool.given_up"
        );
    }
    let record = a.verdict.map(|v| &v.record);
    let upstream = match (a.reply, a.verdict) {
        (Some(r), Some(v)) if v.upstreams_word() => format!("{} {}", r.code, r.lines.join(" ")),
        _ => String::new(),
    };
    let outcome = match (record, next) {
        (Some(record), _) => record.outcome.as_str(),
        (None, Next::GaveUp(_, Reported::Damaged)) => "damaged",
        (None, _) => "expired",
    };
    tracing::info!(
        target: "mailsluice::release",
        id = &*ticket.id,
        layer = ticket.key.layer.as_str(),
        key = ticket.key.key.as_str(),
        attempt = ticket.attempt,
        held_ms = a.held_ms,
        outcome,
        waited_ms = record.map_or(0, |r| r.waited.as_millis() as u64),
        duration_ms = took.as_millis() as u64,
        rcpts = a.rcpts,
        upstream = upstream.as_str(),
        via = record.map_or("", |r| r.via.as_str()),
        next = next.name(),
        retry_in_ms = next.retry_in().map_or(0, |d| d.as_millis() as u64),
        "release"
    );
    spans(ctx, a, took);
    if matches!(next, Next::Delivered) {
        released(ctx, a);
    }
}

/// The tenant's webhooks told that its held message went: upstream's answer and id.
fn released(ctx: &Context, a: &Attempted<'_>) {
    let (Some(tenant), Some((from, to))) = (a.tenant, a.envelope) else {
        return;
    };
    let webhooks = &ctx.services.webhooks;
    if !webhooks.wants(tenant, EventType::Released) {
        return;
    }
    let mut event = webhooks.event(EventType::Released, tenant);
    event.message_id = Some(a.ticket.id.to_string());
    event.upstream_message_id = a.verdict.and_then(|v| v.record.upstream_id.clone());
    event.from = Some(from.unwrap_or_default().to_string());
    event.to = to.to_vec();
    if let Some(reply) = a.reply {
        event.code = Some(reply.code);
        event.reply = Some(reply.text());
    }
    webhooks.emit(event);
}

/// The attempt's spans, as a live message's.
fn spans(ctx: &Context, a: &Attempted<'_>, took: Duration) {
    let (Some(traces), Some(verdict)) = (&ctx.services.traces, a.verdict) else {
        return;
    };
    let record = &verdict.record;
    let forwarded = verdict.upstreams_word() && !record.via.is_empty();
    traces.message(&MessageSpans {
        started: SystemTime::now() - took,
        duration: took,
        waited: record.waited,
        forwarded,
        outcome: record.outcome.as_str(),
        reply_code: a.reply.map(|r| r.code),
        cost: record.cost,
        layer: &record.layer,
        key: &record.key,
        upstream: &record.via,
        traceparent: a.traceparent,
    });
}
