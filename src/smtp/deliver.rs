//! The final dot, top to bottom: the facts of the message, its plan (route, charges and key
//! headers, from `policy`), the wait for tokens (`throttle`), the message as forwarded (trace
//! and route fields added, key headers removed), upstream (`forward`), and upstream's verdict
//! relayed; tokens of a message upstream refused go back. The client gets `250` only after upstream accepted
//! (pass-through, never store-and-forward), so a crash here loses nothing: the client still
//! holds the message.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::received::{self, Trace};
use super::reply::{self, Reply};
use super::session::{Flow, Session};
use crate::message::Envelope;
use crate::message::Outcome;
use crate::policy::{self, Charge, MessageFacts, Plan};
use crate::throttle::{Again, Permit, ThrottleError};
use crate::upstream::{Accepted, Admission, Upstream, UpstreamError};

/// What one message came to, for its log line and the metrics.
pub(super) struct Record {
    pub outcome: Outcome,
    /// The layer and key that decided a refusal, or the first charge of a granted message.
    layer: String,
    key: String,
    cost: u64,
    waited: Duration,
    /// The upstream of its route.
    pub via: String,
}

/// What a message asks the throttle for: its first tokens, or tokens again after upstream
/// throttled it.
pub(super) enum Tokens {
    First(Vec<Charge>),
    Again(Again),
}

/// Why a message got no tokens.
pub(super) enum NoTokens {
    /// The client closed the connection while it waited.
    Abandoned,
    /// Upstream was paused (a quota reply) while it waited: the time left of the pause.
    Paused(Duration),
    Refused(ThrottleError),
}

impl Session {
    pub async fn deliver(&mut self, envelope: Envelope, body: Vec<u8>) -> Flow {
        let started = Instant::now();
        let plan = policy::plan(self.ctx.rules(), &self.facts(&envelope, &body));
        let mut record = self.record(&plan.charges);
        let Some(route) = &plan.route else {
            return self.no_route(&envelope, record, started);
        };
        let upstream = self.ctx.upstreams.get(&route.upstream).cloned();
        let upstream = upstream.expect("route names are validated with the config");
        record.via = upstream.name().to_string();
        let pause = upstream.pause.clone();
        let probe = match pause.admit().await {
            Admission::Open => None,
            Admission::Probe(probe) => Some(probe),
            Admission::Paused(left) => {
                record.outcome = Outcome::Throttled;
                self.verdict(reply::upstream_quota_exhausted(left));
                self.log_message(&envelope, &record, started, None);
                return Flow::Continue;
            }
        };
        let tokens = Tokens::First(plan.charges.clone());
        let permit = match self.wait_for_tokens(tokens, &upstream, &mut record).await {
            Ok(permit) => permit,
            Err(refusal) => {
                let flow = self.refused(refusal, &mut record);
                self.log_message(&envelope, &record, started, None);
                return flow;
            }
        };
        // Our fields, then the client's bytes as runs between the key headers: the pieces go
        // upstream as they are, with no copy of the whole message.
        let ours = self.added_fields(&envelope, &plan);
        let message: Vec<&[u8]> = std::iter::once(ours.as_slice())
            .chain(plan.forwarded(&body))
            .collect();
        let sent =
            self.forward_on_route(&upstream, &plan, &envelope, &message, permit, &mut record);
        let (result, permits) = match sent.await {
            Ok(sent) => sent,
            Err(flow) => {
                self.log_message(&envelope, &record, started, None);
                return flow;
            }
        };
        if let Some(probe) = probe {
            probe.open();
        }
        for permit in permits {
            match &result {
                Ok(_) => permit.delivered(),
                Err(_) => permit.upstream_failed(),
            }
        }
        let reply = reply::upstream_verdict(&result);
        record.outcome = outcome_of(&result);
        self.log_message(&envelope, &record, started, Some(&reply));
        self.verdict(reply);
        Flow::Continue
    }

    /// Routes are configured and none is for this message: a gap in the config the operator
    /// must see (a warning), and a `451` for the client, which keeps the message.
    fn no_route(&mut self, envelope: &Envelope, mut record: Record, started: Instant) -> Flow {
        tracing::warn!(
            target: "mailsluice::route",
            peer = %self.peer,
            "no [[route]] matches this message; refused with 451 4.3.5"
        );
        record.outcome = Outcome::NoRoute;
        let reply = reply::no_route();
        self.log_message(envelope, &record, started, Some(&reply));
        self.verdict(reply);
        Flow::Continue
    }

    /// What the policy may look at.
    fn facts<'a>(&'a self, envelope: &'a Envelope, body: &'a [u8]) -> MessageFacts<'a> {
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

    /// The record of a message charged `charges`, before anything happened to it.
    fn record(&self, charges: &[Charge]) -> Record {
        let first = charges.first();
        Record {
            outcome: Outcome::Delivered,
            layer: first.map_or_else(String::new, |c| self.ctx.layers[c.layer].name.clone()),
            key: first.map_or_else(String::new, |c| c.key.clone()),
            cost: first.map_or(0, |c| c.cost),
            waited: Duration::ZERO,
            via: String::new(),
        }
    }

    /// Takes the tokens of `charges`, holding the client (FIFO per key) while the buckets
    /// refill; `None` when no layer applies. While it waits the connection is watched: a client
    /// that closes it has abandoned the message, which then leaves the queue, takes nothing and
    /// is not forwarded, so a client that saw a failure never finds the message delivered too.
    pub(super) async fn wait_for_tokens(
        &mut self,
        tokens: Tokens,
        upstream: &Upstream,
        record: &mut Record,
    ) -> Result<Option<Permit>, NoTokens> {
        if matches!(&tokens, Tokens::First(charges) if charges.is_empty()) {
            return Ok(None);
        }
        let throttle = self.ctx.throttle.clone();
        let arrived = Instant::now();
        let acquire = async {
            match tokens {
                Tokens::First(charges) => throttle.acquire(charges).await,
                Tokens::Again(again) => throttle.acquire_again(again).await,
            }
        };
        // Biased: a message the buckets let through at once goes, as it would with no layer
        // at all, even if the client already half-closed after a pipelined QUIT; only a
        // real wait is abandoned when the client leaves.
        let pause = upstream.pause.clone();
        let outcome = tokio::select! {
            biased;
            outcome = acquire => Some(outcome),
            _ = self.conn.closed() => None,
            left = pause.paused() => {
                record.waited += arrived.elapsed();
                return Err(NoTokens::Paused(left));
            }
        };
        let permit = match outcome {
            Some(Ok(permit)) => permit,
            Some(Err(error)) => {
                record.waited += arrived.elapsed();
                return Err(NoTokens::Refused(error));
            }
            None => {
                record.waited += arrived.elapsed();
                return Err(NoTokens::Abandoned);
            }
        };
        record.waited += permit.waited();
        for charge in permit.charges() {
            let layer = &self.ctx.layers[charge.layer].name;
            self.ctx.metrics.waited(layer, permit.waited());
        }
        Ok(Some(permit))
    }

    /// Answers a message that got no tokens; how the session goes on.
    pub(super) fn refused(&mut self, refusal: NoTokens, record: &mut Record) -> Flow {
        let error = match refusal {
            NoTokens::Abandoned => {
                record.outcome = Outcome::Abandoned;
                return Flow::Close;
            }
            NoTokens::Paused(left) => {
                record.outcome = Outcome::Throttled;
                self.verdict(reply::upstream_quota_exhausted(left));
                return Flow::Continue;
            }
            NoTokens::Refused(error) => error,
        };
        record.outcome = match &error {
            ThrottleError::Limited { layer, key, .. } => {
                self.ctx.metrics.throttled(layer);
                (record.layer, record.key) = (layer.clone(), key.clone());
                Outcome::Throttled
            }
            ThrottleError::CostOverBurst { layer, .. } => {
                record.layer = layer.clone();
                Outcome::Rejected
            }
            ThrottleError::Shutdown => Outcome::Shutdown,
            ThrottleError::StoreUnavailable => Outcome::StoreUnavailable,
        };
        let reply = reply::throttle_refusal(&error);
        if error == ThrottleError::Shutdown {
            self.reply(reply);
            return Flow::Close;
        }
        self.verdict(reply);
        Flow::Continue
    }

    /// What goes upstream in front of the client's bytes: our `Received:` header, then the
    /// fields the route adds (the key headers and the client's fields of those names are
    /// left out of the client's bytes by `Plan::forwarded`).
    fn added_fields(&self, envelope: &Envelope, plan: &Plan) -> Vec<u8> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let greeting = self.greeting.as_ref();
        let esmtp = greeting.is_some_and(|g| g.esmtp);
        let trace = Trace {
            helo: greeting.map_or("", |g| g.name.as_str()),
            peer: self.peer.ip(),
            hostname: &self.ctx.config.smtp.hostname,
            protocol: received::protocol(esmtp, self.tls, self.auth.is_some()),
            id: &id[..16],
            for_rcpt: match envelope.rcpts.as_slice() {
                [one] => Some(one.as_str()),
                _ => None,
            },
        };
        let mut fields = received::header(&trace, SystemTime::now());
        for (name, value) in plan.route.iter().flat_map(|r| &r.headers) {
            fields.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        fields
    }

    /// One info line per message (no content, no addresses beyond the envelope's counts) and
    /// its outcome counted.
    fn log_message(
        &self,
        envelope: &Envelope,
        record: &Record,
        started: Instant,
        reply: Option<&Reply>,
    ) {
        self.ctx.metrics.message(record.outcome);
        let code = reply.map(|r| r.code);
        (self.ctx.recent).message(record.outcome, &record.layer, &record.key, code);
        let upstream = reply.map(|r| format!("{} {}", r.code, r.lines.join(" ")));
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
            upstream = upstream.as_deref().unwrap_or(""),
            via = record.via.as_str(),
            peer = %self.peer,
            "message"
        );
    }
}

/// The outcome of a message that upstream answered (or did not).
fn outcome_of(result: &Result<Accepted, UpstreamError>) -> Outcome {
    match result {
        Ok(accepted) if accepted.partial => Outcome::Partial,
        Ok(_) => Outcome::Delivered,
        Err(UpstreamError::Unavailable(_)) => Outcome::UpstreamUnavailable,
        Err(UpstreamError::Uncertain(_)) => Outcome::UpstreamUncertain,
        Err(UpstreamError::Rejected { code, .. } | UpstreamError::Pushback { code, .. })
            if *code >= 500 =>
        {
            Outcome::UpstreamPermFail
        }
        Err(UpstreamError::Rejected { .. } | UpstreamError::Pushback { .. }) => {
            Outcome::UpstreamTempFail
        }
    }
}
