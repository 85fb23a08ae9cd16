//! The final dot, top to bottom: the facts of the message, its plan (route, charges and key
//! headers, from `policy`), the wait for tokens (`waiter`), the message as forwarded (trace
//! and route fields added, key headers removed), upstream (`forward`), and one verdict
//! (`verdict`), which the session answers and logs once. Tokens of a message upstream refused
//! go back. The client gets `250` only after upstream accepted (pass-through, never
//! store-and-forward), so a crash here loses nothing: the client still holds the message.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::forward::{self, Outbound};
use super::received::{self, Loop, Trace};
use super::reply;
use super::reputation::tenant_at_dot;
use super::session::{Flow, Session};
use super::verdict::{Held, Record, Verdict};
use super::waiter::{Tokens, Waiter};
use crate::message::{Envelope, Outcome};
use crate::observe::activity::Activity;
use crate::observe::traces::{self, MessageSpans};
use crate::policy::{self, Charge, MessageFacts, Plan};
use crate::state::context::Context;
use crate::state::grace_over::Bell;
use crate::throttle::ThrottleError;
use crate::upstream::{Admission, UpstreamError};

impl Session {
    pub async fn deliver(&mut self, envelope: Envelope, body: Vec<u8>) -> Flow {
        let started = Instant::now();
        let dot = SystemTime::now();
        let facts = self.facts(&envelope, &body);
        let plan = policy::plan(self.ctx.setup.rules(), &facts);
        let tenant = match self.reputation_key(&facts) {
            Some((guard, key)) => Some(tenant_at_dot(&guard, key, self.peer).await),
            None => None,
        };
        let record = record_of(&self.ctx, &plan.charges);
        let id = message_id();
        let greeting = self.greeting.as_ref();
        let trace = Trace {
            helo: greeting.map_or("", |g| g.name.as_str()),
            peer: self.peer.ip(),
            hostname: &self.ctx.setup.config.smtp.hostname,
            instance: &self.ctx.services.instance,
            protocol: received::protocol(
                greeting.is_some_and(|g| g.esmtp),
                self.tls,
                self.auth.is_some(),
            ),
            id: &id,
            for_rcpt: match envelope.rcpts.as_slice() {
                [one] => Some(one.as_str()),
                _ => None,
            },
            repeats: &self.repeats,
        };
        let message = Message {
            envelope: &envelope,
            body: &body,
            plan: &plan,
            peer: self.peer,
            trace: &trace,
        };
        let mut waiter = Waiter {
            ctx: &self.ctx,
            conn: &mut self.conn,
            doing: &mut self.doing,
        };
        let max_received = self.ctx.setup.config.smtp.max_received.get();
        let verdict = match (
            tenant.as_ref().and_then(|t| t.refusal.clone()),
            received::looping(&body, &self.ctx.services.instance, max_received),
        ) {
            (Some(refusal), _) => Verdict::tenant_paused(refusal, record),
            (None, None) => {
                // Pinned here: the final dot's future is large, and is not moved again.
                let dot = std::pin::pin!(final_dot(&mut waiter, &message, record));
                let again = || record_of(&self.ctx, &plan.charges);
                within_grace(dot, self.grace_over.as_deref(), again).await
            }
            (None, Some(Loop::CameBack)) => Verdict::refused(reply::loop_detected(), record),
            (None, Some(Loop::TooManyHops)) => Verdict::refused(reply::too_many_hops(), record),
        };
        self.doing.set(Activity::Command);
        if let Some(tenant) = &tenant {
            (self.reputation_settle(&tenant.key, &envelope, &verdict.record)).await;
        }
        self.log_message(&envelope, &verdict, started);
        self.trace_message(&body, &verdict, dot, started.elapsed());
        let flow = match verdict.closes() {
            true => Flow::Close,
            false => Flow::Continue,
        };
        if let Some(reply) = verdict.reply {
            self.verdict(reply);
        }
        flow
    }

    /// What the policy may look at.
    pub(super) fn facts<'a>(&'a self, envelope: &'a Envelope, body: &'a [u8]) -> MessageFacts<'a> {
        MessageFacts {
            auth_tenant: self.auth.as_ref().map(|u| u.tenant.as_str()),
            // An authenticated client has its user's rights, whatever its address.
            header_trusted: match &self.auth {
                Some(user) => user.trust_key_header,
                None => self.trusted,
            },
            sender: envelope.from.as_deref(),
            rcpts: &envelope.rcpts,
            client_ip: self.peer.ip(),
            message: body,
        }
    }

    /// One info line per message (no content, no addresses beyond the envelope's counts) and
    /// its outcome counted.
    fn log_message(&self, envelope: &Envelope, verdict: &Verdict, started: Instant) {
        let record = &verdict.record;
        let metrics = &self.ctx.services.metrics;
        metrics.message(record.outcome);
        if record.limited {
            metrics.throttled(&record.layer);
        }
        let upstream_reply = verdict.upstream_reply();
        let code = upstream_reply.map(|r| r.code);
        (self.ctx.services.recent).message(record.outcome, &record.layer, &record.key, code);
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
            rcpts = envelope.rcpts.len(),
            upstream = upstream.as_str(),
            via = record.via.as_str(),
            peer = %self.peer,
            "message"
        );
    }
}

impl Session {
    /// The message's spans, when `[telemetry]` is on: times, outcome, reply code, cost and
    /// upstream; the key only with `record_keys`; never addresses or content.
    fn trace_message(&self, body: &[u8], verdict: &Verdict, dot: SystemTime, took: Duration) {
        let Some(traces) = &self.ctx.services.traces else {
            return;
        };
        let record = &verdict.record;
        traces.message(&MessageSpans {
            started: dot,
            duration: took,
            waited: record.waited,
            forwarded: verdict.upstream_reply().is_some() && !record.via.is_empty(),
            outcome: record.outcome.as_str(),
            reply_code: verdict.reply.as_ref().map(|r| r.code),
            cost: record.cost,
            layer: &record.layer,
            key: &record.key,
            upstream: &record.via,
            traceparent: traces::traceparent_of(body),
        });
    }
}

/// One message at its final dot, as the session received it.
struct Message<'a> {
    envelope: &'a Envelope,
    body: &'a [u8],
    plan: &'a Plan,
    peer: SocketAddr,
    /// What our `Received:` field records of the hop (dated when the message goes).
    trace: &'a Trace<'a>,
}

/// The work from the final dot to the verdict: the route's upstream, its pause (the fallback
/// carries what a paused upstream cannot), the tokens, the forwarding, and the tokens settled
/// by upstream's answer.
async fn final_dot(waiter: &mut Waiter<'_>, message: &Message<'_>, record: Record) -> Verdict {
    let plan = message.plan;
    let Some(route) = &plan.route else {
        tracing::warn!(
            target: "mailsluice::route",
            peer = %message.peer,
            "no [[route]] matches this message; refused with 451 4.3.5"
        );
        return Verdict::no_route(record);
    };
    let mut record = record;
    let upstream = waiter.ctx.setup.upstreams.get(&route.upstream).cloned();
    let upstream = upstream.expect("route names are validated with the config");
    record.via = upstream.name().to_string();
    // Our fields, then the client's bytes as runs between the key headers: the pieces go
    // upstream as they are, with no copy of the whole message.
    let ours = added_fields(message.trace, plan);
    let pieces: Vec<&[u8]> = std::iter::once(ours.as_slice())
        .chain(plan.forwarded(message.body))
        .collect();
    let out = Outbound {
        envelope: message.envelope,
        message: &pieces,
        tenant: route.ses_tenant.as_deref(),
    };
    let (probe, permit) = match upstream.pause.admit().await {
        Admission::Paused(left) => (None, Err(Held::Paused(left))),
        admission => {
            let tokens = Tokens::First(plan.charges.clone());
            let permit = waiter.take(tokens, &upstream, &mut record).await;
            match admission {
                Admission::Probe(probe) => (Some(probe), permit),
                _ => (None, permit),
            }
        }
    };
    let sent = match permit {
        Ok(permit) => forward::on_route(waiter, &upstream, plan, &out, permit, &mut record).await,
        Err(Held::Paused(left)) => {
            forward::while_paused(waiter, &upstream, plan, &out, left, &mut record).await
        }
        Err(held) => Err(held),
    };
    let (result, permits) = match sent {
        Ok(sent) => sent,
        Err(held) => return Verdict::held(held, record),
    };
    if let Some(probe) = probe {
        probe.open();
    }
    for permit in permits {
        match &result {
            // Sent whole, no answer: upstream may hold it, so its tokens stay spent (given
            // back, they would let the client's retry, or the next message, past the limit).
            Ok(_) | Err(UpstreamError::Uncertain(_)) => permit.delivered(),
            Err(_) => permit.upstream_failed(),
        }
    }
    Verdict::upstream(&result, record)
}

/// The final dot's verdict, unless the shutdown's grace ends first: then `421` (the message
/// may have been delivered), or `421` at once if the grace was already over (nothing more
/// goes upstream). Biased: what the final dot came to at the grace's end (a waiter's `421`,
/// upstream's answer) is the answer when it is there. `record` makes the record anew.
async fn within_grace(
    dot: impl std::future::Future<Output = Verdict>,
    grace_over: Option<&Bell>,
    record: impl FnOnce() -> Record,
) -> Verdict {
    let Some(grace_over) = grace_over else {
        return dot.await;
    };
    if grace_over.rung() {
        return Verdict::held(Held::Refused(ThrottleError::Shutdown), record());
    }
    tokio::select! {
        biased;
        verdict = dot => verdict,
        _ = grace_over.wait() => Verdict::held(Held::GraceOver, record()),
    }
}

/// The id our `Received:` field gives the message: 64 bits, new for each message. std's
/// `RandomState` is keyed from the OS once per thread and stepped on each use, so this costs
/// no system call (a `uuid` v4 cost one `getrandom` per message).
fn message_id() -> String {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    let n = state.hash_one(());
    let mut id = String::with_capacity(16);
    for i in (0..16).rev() {
        id.push(char::from(
            b"0123456789abcdef"[(n >> (4 * i)) as usize & 0xf],
        ));
    }
    id
}

/// The record of a message charged `charges`, before anything happened to it.
fn record_of(ctx: &Context, charges: &[Charge]) -> Record {
    let first = charges.first();
    Record {
        outcome: Outcome::Delivered,
        layer: first.map_or_else(String::new, |c| ctx.setup.layers[c.layer].name.clone()),
        key: first.map_or_else(String::new, |c| c.key.clone()),
        cost: first.map_or(0, |c| c.cost),
        waited: Duration::ZERO,
        via: String::new(),
        limited: false,
        upstream_id: None,
        hard_bounce: false,
        bounced: Vec::new(),
    }
}

/// What goes upstream in front of the client's bytes: our `Received:` header, then the
/// fields the route adds (the key headers and the client's fields of those names are left
/// out of the client's bytes by `Plan::forwarded`).
fn added_fields(trace: &Trace<'_>, plan: &Plan) -> Vec<u8> {
    let mut fields = received::header(trace, SystemTime::now());
    for (name, value) in plan.route.iter().flat_map(|r| &r.headers) {
        fields.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    fields
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::message_id;

    /// Every message gets an id of its own (16 hex digits), on one thread and across threads.
    #[test]
    fn message_ids_differ_per_message() {
        let mut ids: HashSet<String> = (0..1000).map(|_| message_id()).collect();
        let others = std::thread::spawn(|| (0..1000).map(|_| message_id()).collect::<Vec<_>>());
        ids.extend(others.join().unwrap());
        assert_eq!(ids.len(), 2000);
        assert!(ids
            .iter()
            .all(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
