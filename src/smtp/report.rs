//! What the relay records of one message once the session has answered it: its one log line,
//! its outcome counted, its row among the last refusals, and its spans.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::reply::Reply;
use crate::observe::traces::MessageSpans;
use crate::pipeline::{Message, Verdict};
use crate::state::context::Context;

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
    started: Instant,
    dot: SystemTime,
) {
    line(ctx, message, answered, started);
    spans(ctx, message, answered, dot, started.elapsed());
}

fn line(ctx: &Context, message: &Message<'_>, answered: &Answered<'_>, started: Instant) {
    let record = &answered.verdict.record;
    let metrics = &ctx.services.metrics;
    metrics.message(record.outcome);
    if record.limited {
        metrics.throttled(&record.layer);
    }
    let upstream_reply = answered.upstream_reply();
    let code = upstream_reply.map(|r| r.code);
    (ctx.services.recent).message(record.outcome, &record.layer, &record.key, code);
    // Built only for a log that is on: the one line per message is often filtered out.
    let upstream = match upstream_reply {
        Some(r) if tracing::enabled!(target: "mailsluice::message", tracing::Level::INFO) => {
            format!("{} {}", r.code, r.lines.join(" "))
        }
        _ => String::new(),
    };
    tracing::info!(
        target: "mailsluice::message",
        outcome = record.outcome.as_str(),
        // As `str`, not `%`: the key comes from a client's header, and even tracing's
        // default text format quotes a `str` value, so it cannot forge fields.
        layer = record.layer.as_str(),
        key = record.key.as_str(),
        cost = record.cost,
        waited_ms = record.waited.as_millis() as u64,
        duration_ms = started.elapsed().as_millis() as u64,
        rcpts = message.envelope.rcpts.len(),
        upstream = upstream.as_str(),
        via = record.via.as_str(),
        peer = %message.peer,
        "message"
    );
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
