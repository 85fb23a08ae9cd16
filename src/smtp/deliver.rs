//! The final dot, top to bottom: the facts of the message, its plan (charges and key headers,
//! from `policy`), the wait for tokens (`throttle`), the message as forwarded (trace added,
//! key headers removed), upstream, and upstream's verdict relayed; tokens of a message
//! upstream refused go back. The client gets `250` only after upstream accepted
//! (pass-through, never store-and-forward), so a crash here loses nothing: the client still
//! holds the message.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::received::{self, Trace};
use super::reply::{self, Reply};
use super::session::{Flow, Session};
use crate::config::Feedback;
use crate::metrics::Outcome;
use crate::policy::{self, Charge, MessageFacts, Plan};
use crate::throttle::{Again, Permit, ThrottleError};
use crate::upstream::{Accepted, Admission, Envelope, UpstreamError};

/// What one message came to, for its log line and the metrics.
struct Record {
    outcome: Outcome,
    /// The layer and key that decided a refusal, or the first charge of a granted message.
    layer: String,
    key: String,
    cost: u64,
    waited: Duration,
}

/// What a message asks the throttle for: its first tokens, or tokens again after upstream
/// throttled it.
enum Tokens {
    First(Vec<Charge>),
    Again(Again),
}

/// Why a message got no tokens.
enum NoTokens {
    /// The client closed the connection while it waited.
    Abandoned,
    /// Upstream was paused (a quota reply) while it waited: the time left of the pause.
    Paused(Duration),
    Refused(ThrottleError),
}

impl Session {
    pub async fn deliver(&mut self, envelope: Envelope, body: Vec<u8>) -> Flow {
        let started = Instant::now();
        let plan = policy::plan(&self.ctx.layers, &self.facts(&envelope, &body));
        let mut record = self.record(&plan.charges);
        let pause = self.ctx.pause.clone();
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
        let permit = match self
            .wait_for_tokens(Tokens::First(plan.charges.clone()), &mut record)
            .await
        {
            Ok(permit) => permit,
            Err(refusal) => {
                let flow = self.refused(refusal, &mut record);
                self.log_message(&envelope, &record, started, None);
                return flow;
            }
        };
        let message = self.forwarded(&envelope, &body, &plan);
        drop(body);
        let (result, permit) = match self
            .forward_absorbing(&envelope, &message, permit, &mut record)
            .await
        {
            Ok(sent) => sent,
            Err(flow) => {
                self.log_message(&envelope, &record, started, None);
                return flow;
            }
        };
        if let Some(probe) = probe {
            probe.open();
        }
        match (permit, &result) {
            (Some(permit), Ok(_)) => permit.delivered(),
            (Some(permit), Err(_)) => permit.upstream_failed(),
            (None, _) => {}
        }
        let reply = reply::upstream_verdict(&result);
        record.outcome = match &result {
            Ok(_) => Outcome::Delivered,
            Err(UpstreamError::Unavailable(_)) => Outcome::UpstreamUnavailable,
            Err(UpstreamError::Uncertain(_)) => Outcome::UpstreamUncertain,
            Err(UpstreamError::Rejected { code, .. }) if *code >= 500 => Outcome::UpstreamPermFail,
            Err(UpstreamError::Rejected { .. }) => Outcome::UpstreamTempFail,
        };
        self.log_message(&envelope, &record, started, Some(&reply));
        self.verdict(reply);
        Flow::Continue
    }

    /// Forwards the message; a throttle reply of upstream is absorbed when an adaptive layer
    /// charged it: the message was not accepted, so it waits again (ahead of later arrivals,
    /// within its budget from the final dot) and goes again, never relaying the `454` as if
    /// final. `Err` when the client has been answered here (budget spent, abandoned).
    async fn forward_absorbing(
        &mut self,
        envelope: &Envelope,
        message: &[u8],
        mut permit: Option<Permit>,
        record: &mut Record,
    ) -> Result<(Result<Accepted, UpstreamError>, Option<Permit>), Flow> {
        loop {
            // Granted in the instant a quota reply paused upstream: it does not go either.
            if let Some(left) = self.ctx.pause.left() {
                if let Some(permit) = permit {
                    permit.upstream_failed();
                }
                record.outcome = Outcome::Throttled;
                self.verdict(reply::upstream_quota_exhausted(left));
                return Err(Flow::Continue);
            }
            let upstream_started = Instant::now();
            let result = self.ctx.forwarder.forward(envelope, message).await;
            self.ctx.metrics.upstream(upstream_started.elapsed());
            let feedback = match &result {
                Err(UpstreamError::Rejected {
                    code,
                    enhanced,
                    text,
                }) => {
                    let text = enhanced
                        .as_ref()
                        .map_or_else(|| text.clone(), |e| format!("{e} {text}"));
                    self.ctx.config.upstream.classify(*code, &text)
                }
                _ => None,
            };
            let Some(feedback) = feedback else {
                return Ok((result, permit));
            };
            self.ctx.metrics.upstream_throttled(feedback.as_str());
            tracing::info!(
                target: "mailsluice::upstream",
                reason = feedback.as_str(),
                upstream = %result.as_ref().err().map(ToString::to_string).unwrap_or_default(),
                "upstream.throttled"
            );
            if feedback == Feedback::Quota {
                return Err(self.quota_reply(permit, record));
            }
            let absorbed = permit.as_ref().is_some_and(Permit::adaptive);
            let held = match permit {
                Some(held) if absorbed => held,
                _ => return Ok((result, permit)),
            };
            let again = held.throttled(feedback == Feedback::Rate);
            permit = Some(self.wait_again(again, record).await?);
        }
    }

    /// Upstream's quota is spent: pause it, give the tokens back (nothing was sent) and
    /// answer with the pause as the hint.
    fn quota_reply(&mut self, permit: Option<Permit>, record: &mut Record) -> Flow {
        let pause = Duration::from_millis(self.ctx.config.upstream.quota_pause_ms.get());
        self.ctx.pause.pause(pause);
        if let Some(permit) = permit {
            permit.upstream_failed();
        }
        record.outcome = Outcome::Throttled;
        self.verdict(reply::upstream_quota_exhausted(pause));
        Flow::Continue
    }

    /// The wait of a message upstream throttled; past its budget the client gets `451 4.7.1
    /// Upstream rate limit reached` (nothing was accepted upstream).
    async fn wait_again(&mut self, again: Again, record: &mut Record) -> Result<Permit, Flow> {
        match self.wait_for_tokens(Tokens::Again(again), record).await {
            Ok(Some(permit)) => Ok(permit),
            Ok(None) => unreachable!("a message sent again is charged"),
            Err(NoTokens::Refused(ThrottleError::Limited { retry_after, .. })) => {
                record.outcome = Outcome::Throttled;
                self.verdict(reply::upstream_rate_limited(retry_after));
                Err(Flow::Continue)
            }
            Err(refusal) => Err(self.refused(refusal, record)),
        }
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
        }
    }

    /// Takes the tokens of `charges`, holding the client (FIFO per key) while the buckets
    /// refill; `None` when no layer applies. While it waits the connection is watched: a client
    /// that closes it has abandoned the message, which then leaves the queue, takes nothing and
    /// is not forwarded, so a client that saw a failure never finds the message delivered too.
    async fn wait_for_tokens(
        &mut self,
        tokens: Tokens,
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
        let pause = self.ctx.pause.clone();
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
    fn refused(&mut self, refusal: NoTokens, record: &mut Record) -> Flow {
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

    /// The message as it goes upstream: our `Received:` header in front, the key headers out.
    fn forwarded(&self, envelope: &Envelope, body: &[u8], plan: &Plan) -> Vec<u8> {
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
        let mut message = received::header(&trace, SystemTime::now());
        message.reserve(body.len());
        for piece in plan.forwarded(body) {
            message.extend_from_slice(piece);
        }
        message
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
            peer = %self.peer,
            "message"
        );
    }
}
