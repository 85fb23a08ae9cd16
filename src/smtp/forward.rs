//! The upstream leg of the final dot: the message goes to its route's upstream; a throttle
//! reply is absorbed (the message waits again and goes again), a quota reply pauses that
//! upstream, and an upstream that cannot be reached hands the message to the route's fallback.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::deliver::{NoTokens, Record, Tokens};
use super::reply;
use super::session::{Flow, Session};
use crate::message::Envelope;
use crate::message::Outcome;
use crate::policy::Plan;
use crate::throttle::{Again, Permit, ThrottleError};
use crate::upstream::{Accepted, Feedback, Upstream, UpstreamError};

/// Upstream's verdict, and the permits whose tokens it settles.
pub(super) type Sent = (Result<Accepted, UpstreamError>, Vec<Permit>);

impl Session {
    /// Forwards the message on its route: to the upstream, and when nothing of it could reach
    /// that upstream (`Unavailable`), to the fallback, charged to the fallback's own layers
    /// instead of the upstream's. Never after `Uncertain` (it may have been delivered) nor after a reply (upstream
    /// decided). `Err` when the client has been answered here.
    pub(super) async fn forward_on_route(
        &mut self,
        upstream: &Arc<Upstream>,
        plan: &Plan,
        envelope: &Envelope,
        message: &[&[u8]],
        permit: Option<Permit>,
        record: &mut Record,
    ) -> Result<Sent, Flow> {
        let (result, permit) =
            (self.forward_absorbing(upstream, envelope, message, permit, record)).await?;
        let mut permits: Vec<Permit> = permit.into_iter().collect();
        let fallback = plan.route.as_ref().and_then(|r| r.fallback.as_deref());
        let (Err(UpstreamError::Unavailable(why)), Some(fallback)) = (&result, fallback) else {
            return Ok((result, permits));
        };
        let fallback = self
            .ctx
            .upstreams
            .get(fallback)
            .cloned()
            .expect("validated name");
        // Nothing reached the first upstream: its own layers' tokens go back.
        let layers = &self.ctx.layers;
        let its_own = |layer: usize| layers[layer].upstream.as_deref() == Some(upstream.name());
        permits.iter_mut().for_each(|p| p.not_sent_through(its_own));
        record.via = fallback.name().to_string();
        tracing::warn!(
            target: "mailsluice::upstream",
            upstream = upstream.name(),
            fallback = fallback.name(),
            error = why.as_str(),
            "upstream unreachable; the message goes to the fallback"
        );
        let tokens = Tokens::First(plan.fallback_charges.clone());
        let extra = match self.wait_for_tokens(tokens, &fallback, record).await {
            Ok(extra) => extra,
            Err(refusal) => {
                permits.into_iter().for_each(Permit::upstream_failed);
                return Err(self.refused(refusal, record));
            }
        };
        let sent = self.forward_absorbing(&fallback, envelope, message, extra, record);
        let (result, extra) = match sent.await {
            Ok(sent) => sent,
            Err(flow) => {
                permits.into_iter().for_each(Permit::upstream_failed);
                return Err(flow);
            }
        };
        permits.extend(extra);
        Ok((result, permits))
    }

    /// Forwards the message; a throttle reply of upstream is absorbed when an adaptive layer
    /// charged it: the message was not accepted, so it waits again (ahead of later arrivals,
    /// within its budget from the final dot) and goes again, never relaying the `454` as if
    /// final. `Err` when the client has been answered here (budget spent, abandoned).
    async fn forward_absorbing(
        &mut self,
        upstream: &Arc<Upstream>,
        envelope: &Envelope,
        message: &[&[u8]],
        mut permit: Option<Permit>,
        record: &mut Record,
    ) -> Result<(Result<Accepted, UpstreamError>, Option<Permit>), Flow> {
        loop {
            // Granted in the instant a quota reply paused upstream: it does not go either.
            if let Some(left) = upstream.pause.left() {
                if let Some(permit) = permit {
                    permit.upstream_failed();
                }
                record.outcome = Outcome::Throttled;
                self.verdict(reply::upstream_quota_exhausted(left));
                return Err(Flow::Continue);
            }
            let upstream_started = Instant::now();
            let result = upstream.forwarder.forward_pieces(envelope, message).await;
            (self.ctx.metrics).upstream(upstream.name(), upstream_started.elapsed());
            let Some(feedback) = result.as_ref().err().and_then(UpstreamError::feedback) else {
                return Ok((result, permit));
            };
            self.ctx
                .metrics
                .upstream_throttled(upstream.name(), feedback.as_str());
            tracing::info!(
                target: "mailsluice::upstream",
                reason = feedback.as_str(),
                name = upstream.name(),
                upstream = %result.as_ref().err().map(ToString::to_string).unwrap_or_default(),
                "upstream.throttled"
            );
            if feedback.pauses() {
                return Err(self.quota_reply(upstream, permit, record));
            }
            let absorbed = permit.as_ref().is_some_and(Permit::adaptive);
            let held = match permit {
                Some(held) if absorbed => held,
                _ => return Ok((result, permit)),
            };
            let again = held.throttled(feedback == Feedback::Rate);
            permit = Some(self.wait_again(again, upstream, record).await?);
        }
    }

    /// Upstream's quota is spent: pause it, give the tokens back (nothing was sent) and
    /// answer with the pause as the hint.
    fn quota_reply(
        &mut self,
        upstream: &Upstream,
        permit: Option<Permit>,
        record: &mut Record,
    ) -> Flow {
        let pause = Duration::from_millis(upstream.config.quota_pause_ms.get());
        upstream.pause.pause(pause);
        if let Some(permit) = permit {
            permit.upstream_failed();
        }
        record.outcome = Outcome::Throttled;
        self.verdict(reply::upstream_quota_exhausted(pause));
        Flow::Continue
    }

    /// The wait of a message upstream throttled; past its budget the client gets `451 4.7.1
    /// Upstream rate limit reached` (nothing was accepted upstream).
    async fn wait_again(
        &mut self,
        again: Again,
        upstream: &Upstream,
        record: &mut Record,
    ) -> Result<Permit, Flow> {
        match self
            .wait_for_tokens(Tokens::Again(again), upstream, record)
            .await
        {
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
}
