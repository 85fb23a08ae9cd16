//! The upstream leg of the final dot, one policy: the message goes to its route's upstream;
//! a throttle reply is absorbed (the message waits again and goes again), a quota reply
//! pauses that upstream, and an upstream that cannot be reached hands the message to the
//! route's fallback. It ends in upstream's verdict, or in why the message was held.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::verdict::{Held, Record};
use super::waiter::{Tokens, Waiter};
use crate::config::UpstreamKind;
use crate::message::Envelope;
use crate::policy::Plan;
use crate::throttle::{Permit, Teaches, ThrottleError};
use crate::upstream::{Accepted, Feedback, Upstream, UpstreamError};

/// Upstream's verdict, and the permits whose tokens it settles.
pub(super) type Sent = (Result<Accepted, UpstreamError>, Vec<Permit>);

/// One message as it goes upstream: the envelope as the client gave it and the pieces of the
/// message (our fields, then the client's bytes).
pub(super) struct Outbound<'m> {
    pub envelope: &'m Envelope,
    pub message: &'m [&'m [u8]],
}

/// Forwards the message on its route: to the upstream, and when nothing of it could reach
/// that upstream (`Unavailable`), to the fallback, charged to the fallback's own layers
/// instead of the upstream's. Never after `Uncertain` (it may have been delivered) nor after
/// a reply (upstream decided). A message held on the way has its tokens settled here.
pub(super) async fn on_route(
    waiter: &mut Waiter<'_>,
    upstream: &Arc<Upstream>,
    plan: &Plan,
    out: &Outbound<'_>,
    permit: Option<Permit>,
    record: &mut Record,
) -> Result<Sent, Held> {
    let (result, permit) = absorbing(waiter, upstream, out, permit, record).await?;
    let mut permits: Vec<Permit> = permit.into_iter().collect();
    let fallback = plan.route.as_ref().and_then(|r| r.fallback.as_deref());
    let (Err(UpstreamError::Unavailable(why)), Some(fallback)) = (&result, fallback) else {
        return Ok((result, permits));
    };
    let ctx = waiter.ctx;
    let fallback = ctx
        .upstreams
        .get(fallback)
        .cloned()
        .expect("validated name");
    // Nothing reached the first upstream: its own layers' tokens go back.
    let its_own = |layer: usize| ctx.layers[layer].upstream.as_deref() == Some(upstream.name());
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
    let sent = match waiter.take(tokens, &fallback, record).await {
        Ok(extra) => absorbing(waiter, &fallback, out, extra, record).await,
        Err(held) => Err(held),
    };
    match sent {
        Ok((result, extra)) => {
            permits.extend(extra);
            Ok((result, permits))
        }
        Err(held) => {
            permits.into_iter().for_each(Permit::upstream_failed);
            Err(held)
        }
    }
}

/// Forwards the message; a throttle reply of upstream is absorbed when an adaptive layer
/// charged it: the message was not accepted, so it waits again (ahead of later arrivals,
/// within its budget from the final dot) and goes again, never relaying the `454` as if
/// final. A reply that pauses upstream (quota) pauses it, and the message is held.
async fn absorbing(
    waiter: &mut Waiter<'_>,
    upstream: &Arc<Upstream>,
    out: &Outbound<'_>,
    mut permit: Option<Permit>,
    record: &mut Record,
) -> Result<(Result<Accepted, UpstreamError>, Option<Permit>), Held> {
    let metrics = &waiter.ctx.metrics;
    loop {
        // Granted in the instant a quota reply paused upstream: it does not go either.
        if let Some(left) = upstream.pause.left() {
            if let Some(permit) = permit {
                permit.upstream_failed();
            }
            return Err(Held::Paused(left));
        }
        let upstream_started = Instant::now();
        let result = (upstream.forwarder)
            .forward_pieces(out.envelope, out.message)
            .await;
        metrics.upstream(upstream.name(), upstream_started.elapsed());
        let Some(feedback) = result.as_ref().err().and_then(UpstreamError::feedback) else {
            return Ok((result, permit));
        };
        metrics.upstream_throttled(upstream.name(), feedback.as_str());
        tracing::info!(
            target: "mailsluice::upstream",
            reason = feedback.as_str(),
            name = upstream.name(),
            upstream = %result.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            "upstream.throttled"
        );
        if feedback.pauses() {
            // Nothing was sent: the tokens go back, and the pause is the client's hint.
            let pause = Duration::from_millis(upstream.config.quota_pause_ms.get());
            upstream.pause.pause(pause);
            if let Some(permit) = permit {
                permit.upstream_failed();
            }
            return Err(Held::Paused(pause));
        }
        let held = match permit {
            Some(held) if held.adaptive() => held,
            _ => return Ok((result, permit)),
        };
        // An `mx://` reply is about one domain's servers: only its domain's buckets learn.
        let teaches = match upstream.config.kind {
            UpstreamKind::Mx(_) => Teaches::RcptDomain,
            _ => Teaches::Every,
        };
        let again = Tokens::Again(held.throttled(feedback == Feedback::Rate, teaches));
        permit = match waiter.take(again, upstream, record).await {
            Ok(Some(permit)) => Some(permit),
            Ok(None) => unreachable!("a message sent again is charged"),
            // Past its budget: `451 4.7.1 Upstream rate limit reached` (nothing was accepted).
            Err(Held::Refused(ThrottleError::Limited { retry_after, .. })) => {
                return Err(Held::UpstreamRate(retry_after))
            }
            Err(held) => return Err(held),
        };
    }
}
