//! What the relay records of one message once the session has answered it: its one log line,
//! its outcome counted, its row among the last refusals, and its spans. Every message the
//! session answers has exactly one line: at its final dot (`message`), or when the session
//! refused it itself before (`refused`: at MAIL, at DATA, for its size or content).

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::message::Outcome;
use crate::observe::traces::MessageSpans;
use crate::pipeline::{Message, Record, Verdict};
use crate::reply::Reply;
use crate::state::context::Context;
use crate::throttle::LimitReason;
use crate::webhook::event::EventType;

/// One message's verdict and the reply it was answered with (none when the client left).
pub(super) struct Answered<'a> {
    pub verdict: &'a Verdict,
    pub reply: Option<&'a Reply>,
}

impl Answered<'_> {
    /// The reply when it is upstream's (or the routes') word on the message.
    fn upstream_reply(&self) -> Option<&Reply> {
        self.reply.filter(|_| self.verdict.upstreams_word())
    }
}

/// One info line per message (no content, no addresses beyond the envelope's counts), its
/// outcome counted, and its spans when `[telemetry]` is on. `started` is when its final dot
/// came, `dot` the same on the wall clock.
pub(super) fn message(
    ctx: &Context,
    message: &Message<'_>,
    answered: &Answered<'_>,
    suppressed: usize,
    started: Instant,
    dot: SystemTime,
) {
    let facts = Facts {
        record: &answered.verdict.record,
        reply: answered.reply,
        upstream_reply: answered.upstream_reply(),
        rcpts: message.envelope.rcpts.len(),
        suppressed,
        peer: message.peer,
        took: started.elapsed(),
    };
    line(ctx, &facts);
    spans(ctx, message, answered, dot, started.elapsed());
    notify(ctx, message, answered);
}

/// The line, the count and the status page's row of a message the relay refused on its own
/// before its final dot could be answered by the pipeline: at MAIL (its tenant paused), at
/// DATA (no recipient left), or after its data (its size or content). `started` is when the
/// refusal began (the command, or the data's end).
pub(super) fn refused(
    ctx: &Context,
    outcome: Outcome,
    reply: &Reply,
    (rcpts, suppressed): (usize, usize),
    key: &str,
    peer: SocketAddr,
    started: Instant,
) {
    let mut record = Record::refused(outcome);
    record.key = key.to_string();
    let facts = Facts {
        record: &record,
        reply: Some(reply),
        upstream_reply: None,
        rcpts,
        suppressed,
        peer,
        took: started.elapsed(),
    };
    line(ctx, &facts);
}

/// What one `message` line says.
struct Facts<'a> {
    record: &'a Record,
    /// The reply the client got (none when it left).
    reply: Option<&'a Reply>,
    /// The reply when it is upstream's (or the routes') word on the message.
    upstream_reply: Option<&'a Reply>,
    rcpts: usize,
    /// Its RCPTs refused as suppressed (the others went on).
    suppressed: usize,
    peer: SocketAddr,
    took: Duration,
}

fn line(ctx: &Context, facts: &Facts<'_>) {
    let record = facts.record;
    let metrics = &ctx.services.metrics;
    metrics.message(record.outcome);
    // A layer's refusal; a held message was taken, whatever kept it from going now.
    if record.limited.is_some() && record.outcome == Outcome::Throttled {
        metrics.throttled(&record.layer);
    }
    let layer = record.refusing_layer();
    let code = facts.reply.map(|r| r.code);
    let recent = &ctx.services.recent;
    recent.message(record.outcome, layer, &record.key, code, record.limited);
    // Built only for a log that is on: the one line per message is often filtered out.
    let upstream = match facts.upstream_reply {
        Some(r) if tracing::enabled!(target: "mailsluice::message", tracing::Level::INFO) => {
            r.text()
        }
        _ => String::new(),
    };
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
        duration_ms = facts.took.as_millis() as u64,
        rcpts = facts.rcpts,
        suppressed = facts.suppressed,
        upstream = upstream.as_str(),
        via = record.via.as_str(),
        peer = %facts.peer,
        "message"
    );
}

/// The tenant's webhooks told what the client was told: `accepted` (upstream's `250`), `held`
/// (hold mode's `250`: `released` follows when it goes) or `refused` (any other reply).
/// Nothing when the client left before its answer.
fn notify(ctx: &Context, message: &Message<'_>, answered: &Answered<'_>) {
    let (tenant, Some(reply)) = (&message.identity.tenant, answered.reply) else {
        return;
    };
    let record = &answered.verdict.record;
    let kind = match record.outcome {
        Outcome::Delivered | Outcome::Partial => EventType::Accepted,
        Outcome::Held => EventType::Held,
        _ => EventType::Refused,
    };
    let webhooks = &ctx.services.webhooks;
    if !webhooks.wants(tenant, kind) {
        return;
    }
    let mut event = webhooks.event(kind, tenant);
    event.message_id = Some(message.id.to_string());
    event.upstream_message_id = record.upstream_id.clone();
    event.from = Some(message.envelope.from.clone().unwrap_or_default());
    event.to = message.envelope.rcpts.clone();
    event.code = Some(reply.code);
    event.reply = Some(reply.text());
    if kind == EventType::Refused {
        event.outcome = Some(record.outcome.as_str());
    }
    webhooks.emit(event);
}

/// The message's spans: times, outcome, reply code, cost and upstream; the key only with
/// `record_keys`; never addresses or content.
fn spans(
    ctx: &Context,
    message: &Message<'_>,
    answered: &Answered<'_>,
    dot: SystemTime,
    took: Duration,
) {
    let Some(traces) = &ctx.services.traces else {
        return;
    };
    let record = &answered.verdict.record;
    traces.message(&MessageSpans {
        started: dot,
        duration: took,
        waited: record.waited,
        forwarded: answered.upstream_reply().is_some() && !record.via.is_empty(),
        outcome: record.outcome.as_str(),
        reply_code: answered.reply.map(|r| r.code),
        cost: record.cost,
        layer: &record.layer,
        key: &record.key,
        upstream: &record.via,
        traceparent: message.identity.traceparent.as_deref(),
    });
}
