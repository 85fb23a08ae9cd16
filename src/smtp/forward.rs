//! The upstream leg of the final dot, one policy: the message goes to its route's upstream;
//! a throttle reply is absorbed (the message waits again and goes again), a quota reply
//! pauses that upstream, and an upstream that cannot be reached or is paused hands the
//! message to the route's fallback. It ends in upstream's verdict, or in why the message was held.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::verdict::{Held, Record};
use super::waiter::{Tokens, Waiter};
use crate::config::UpstreamKind;
use crate::message::Envelope;
use crate::policy::Plan;
use crate::state::context::Context;
use crate::throttle::{Permit, Teaches, ThrottleError};
use crate::upstream::{Accepted, Feedback, Upstream, UpstreamError};

/// Upstream's verdict, and the permits whose tokens it settles.
pub(super) type Sent = (Result<Accepted, UpstreamError>, Vec<Permit>);

/// One message as it goes upstream: the envelope as the client gave it and the pieces of the
/// message (our fields, then the client's bytes).
pub(super) struct Outbound<'m> {
    pub envelope: &'m Envelope,
    pub message: &'m [&'m [u8]],
    /// The upstream's tenant the route sends it as (`ses_tenant`).
    pub tenant: Option<&'m str>,
}

/// What became of a message at one upstream.
enum Leg {
    /// Upstream's verdict (or why there was none), and the message's permit.
    Answered(Result<Accepted, UpstreamError>, Option<Permit>),
    /// Upstream is paused (it was, or its answer paused it): nothing went; the time left.
    Paused(Duration, Option<Permit>),
}

/// Forwards the message on its route: to the upstream, and when nothing of it could reach
/// that upstream (`Unavailable`, or the upstream is paused), to the fallback, charged to the
/// fallback's own layers instead of the upstream's. Never after `Uncertain` (it may have been
/// delivered) nor after a reply (upstream decided). A message held on the way has its tokens
/// settled here.
pub(super) async fn on_route(
    waiter: &mut Waiter<'_>,
    upstream: &Arc<Upstream>,
    plan: &Plan,
    out: &Outbound<'_>,
    permit: Option<Permit>,
    record: &mut Record,
) -> Result<Sent, Held> {
    let leg = absorbing(waiter, upstream, out, permit, record).await?;
    let (why, permit) = match (leg, fallback_name(plan)) {
        (Leg::Answered(Err(UpstreamError::Unavailable(why)), permit), Some(_)) => (why, permit),
        (Leg::Paused(left, permit), Some(_)) => (paused_for(left), permit),
        (Leg::Answered(result, permit), _) => return Ok((result, permit.into_iter().collect())),
        (Leg::Paused(left, permit), None) => {
            permit.into_iter().for_each(Permit::upstream_failed);
            return Err(Held::Paused(left));
        }
    };
    let tokens = Tokens::First(plan.fallback_charges.clone());
    let permits = permit.into_iter().collect();
    let fallback = fallback_of(waiter, upstream, plan, &why, record);
    to_fallback(waiter, upstream, &fallback, out, permits, tokens, record).await
}

/// The route's upstream was paused before the message took its tokens: with a fallback, the
/// message goes there, charged the route's layers but the paused upstream's own, and the
/// fallback's; without one it is held (`451 4.7.1`).
pub(super) async fn while_paused(
    waiter: &mut Waiter<'_>,
    upstream: &Arc<Upstream>,
    plan: &Plan,
    out: &Outbound<'_>,
    left: Duration,
    record: &mut Record,
) -> Result<Sent, Held> {
    if fallback_name(plan).is_none() {
        return Err(Held::Paused(left));
    }
    let its_own = own_layers(waiter.ctx, upstream);
    let mut charges: Vec<_> = (plan.charges.iter())
        .filter(|c| !its_own(c.layer))
        .chain(&plan.fallback_charges)
        .cloned()
        .collect();
    charges.sort_by_key(|c| c.layer);
    let tokens = Tokens::First(charges);
    let fallback = fallback_of(waiter, upstream, plan, &paused_for(left), record);
    to_fallback(waiter, upstream, &fallback, out, Vec::new(), tokens, record).await
}

/// The name of the route's fallback, when it has one.
fn fallback_name(plan: &Plan) -> Option<&str> {
    plan.route.as_ref().and_then(|r| r.fallback.as_deref())
}

/// Whether a layer is `upstream`'s own (scoped to it): a message that never reached it gets
/// those tokens back when it goes to the fallback.
fn own_layers<'a>(ctx: &'a Context, upstream: &'a Upstream) -> impl Fn(usize) -> bool + 'a {
    move |layer| ctx.setup.layers[layer].upstream.as_deref() == Some(upstream.name())
}

fn paused_for(left: Duration) -> String {
    format!("paused for {} ms more", left.as_millis())
}

/// The route's fallback, which carries the message instead of `upstream` (recorded, logged).
fn fallback_of(
    waiter: &Waiter<'_>,
    upstream: &Upstream,
    plan: &Plan,
    why: &str,
    record: &mut Record,
) -> Arc<Upstream> {
    let fallback = fallback_name(plan)
        .and_then(|f| waiter.ctx.setup.upstreams.get(f).cloned())
        .expect("validated name");
    record.via = fallback.name().to_string();
    tracing::warn!(
        target: "mailsluice::upstream",
        upstream = upstream.name(),
        fallback = fallback.name(),
        error = why,
        "upstream unreachable or paused; the message goes to the fallback"
    );
    fallback
}

/// The message goes to `fallback` instead of `upstream`, which it never reached: the tokens
/// `permits` hold on `upstream`'s own layers go back, `tokens` are taken for the fallback.
async fn to_fallback(
    waiter: &mut Waiter<'_>,
    upstream: &Upstream,
    fallback: &Arc<Upstream>,
    out: &Outbound<'_>,
    mut permits: Vec<Permit>,
    tokens: Tokens,
    record: &mut Record,
) -> Result<Sent, Held> {
    permits
        .iter_mut()
        .for_each(|p| p.not_sent_through(own_layers(waiter.ctx, upstream)));
    let sent = match waiter.take(tokens, fallback, record).await {
        Ok(extra) => absorbing(waiter, fallback, out, extra, record).await,
        Err(held) => Err(held),
    };
    match sent {
        Ok(Leg::Answered(result, extra)) => {
            permits.extend(extra);
            Ok((result, permits))
        }
        Ok(Leg::Paused(left, extra)) => {
            (permits.into_iter().chain(extra)).for_each(Permit::upstream_failed);
            Err(Held::Paused(left))
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
/// final. A reply that pauses upstream (quota, paused) pauses it, and nothing went.
async fn absorbing(
    waiter: &mut Waiter<'_>,
    upstream: &Arc<Upstream>,
    out: &Outbound<'_>,
    mut permit: Option<Permit>,
    record: &mut Record,
) -> Result<Leg, Held> {
    let metrics = &waiter.ctx.services.metrics;
    loop {
        // Granted in the instant a quota reply paused upstream: it does not go either.
        if let Some(left) = upstream.pause.left() {
            return Ok(Leg::Paused(left, permit));
        }
        let upstream_started = Instant::now();
        let result = (upstream.forwarder)
            .forward_for_tenant(out.envelope, out.message, out.tenant)
            .await;
        metrics.upstream(upstream.name(), upstream_started.elapsed());
        let Some(feedback) = result.as_ref().err().and_then(UpstreamError::feedback) else {
            return Ok(Leg::Answered(result, permit));
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
            // Nothing was sent: the caller settles the tokens; the pause is the client's hint.
            let pause = Duration::from_millis(upstream.config.quota_pause_ms.get());
            upstream.pause.pause(pause);
            return Ok(Leg::Paused(pause, permit));
        }
        let held = match permit {
            Some(held) if held.adaptive() => held,
            _ => return Ok(Leg::Answered(result, permit)),
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
