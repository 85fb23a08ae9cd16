//! The upstream leg: the message goes to its route's upstream; a throttle reply is absorbed
//! (the message waits again and goes again), a quota reply pauses that upstream, and an
//! upstream that cannot be reached or is paused hands the message to the route's fallback. It
//! ends in upstream's answer, or in why the message went unanswered.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::client::Client;
use super::verdict::{Record, Unanswered};
use super::wait::{Tokens, Wait};
use crate::message::Envelope;
use crate::observe::cause;
use crate::policy::Identity;
use crate::state::context::Context;
use crate::throttle::{Permit, Teaches, ThrottleError};
use crate::upstream::breaker::Change;
use crate::upstream::{Accepted, Feedback, Outgoing, Upstream, UpstreamError};

/// Upstream's answer, and the permits whose tokens it settles.
pub(super) type Sent = (Result<Accepted, UpstreamError>, Vec<Permit>);

/// What became of a message at one upstream.
enum LegEnd {
    /// Upstream's answer (or why there was none), and the message's permit.
    Answered(Result<Accepted, UpstreamError>, Option<Permit>),
    /// Upstream is paused (it was, or its answer paused it): nothing went; the time left.
    Paused(Duration, Option<Permit>),
}

/// Forwards the message on its route: to the upstream, and when nothing of it could reach
/// that upstream (`Unavailable`, or the upstream is paused), to the fallback, charged to the
/// fallback's own layers instead of the upstream's. Never after `Uncertain` (it may have been
/// delivered) nor after a reply (upstream decided). A message unanswered on the way has its
/// tokens settled here.
pub(super) async fn on_route<C: Client>(
    wait: &mut Wait<'_, C>,
    upstream: &Arc<Upstream>,
    identity: &Identity,
    out: &Outgoing<'_>,
    permit: Option<Permit>,
    record: &mut Record,
) -> Result<Sent, Unanswered> {
    let leg = absorbing(wait, upstream, out, permit, record).await?;
    let (why, permit) = match (leg, fallback_name(identity)) {
        (LegEnd::Answered(Err(UpstreamError::Unavailable(why)), permit), Some(_)) => (why, permit),
        (LegEnd::Paused(left, permit), Some(_)) => (paused_for(left), permit),
        (LegEnd::Answered(result, permit), _) => return Ok((result, permit.into_iter().collect())),
        (LegEnd::Paused(left, permit), None) => {
            permit.into_iter().for_each(Permit::upstream_failed);
            return Err(Unanswered::Paused(left));
        }
    };
    let tokens = Tokens::First(identity.fallback_charges.clone());
    let permits = permit.into_iter().collect();
    let fallback = fallback_of(wait.ctx, upstream, identity, &why, record);
    to_fallback(wait, upstream, &fallback, out, permits, tokens, record).await
}

/// The route's upstream was paused before the message took its tokens: with a fallback, the
/// message goes there, charged the route's layers but the paused upstream's own, and the
/// fallback's; without one it goes unanswered (`451 4.7.1`).
pub(super) async fn while_paused<C: Client>(
    wait: &mut Wait<'_, C>,
    upstream: &Arc<Upstream>,
    identity: &Identity,
    out: &Outgoing<'_>,
    left: Duration,
    record: &mut Record,
) -> Result<Sent, Unanswered> {
    if fallback_name(identity).is_none() {
        return Err(Unanswered::Paused(left));
    }
    let its_own = own_layers(wait.ctx, upstream);
    let mut charges: Vec<_> = (identity.charges.iter())
        .filter(|c| !its_own(c.layer))
        .chain(&identity.fallback_charges)
        .cloned()
        .collect();
    charges.sort_by_key(|c| c.layer);
    let tokens = Tokens::First(charges);
    let fallback = fallback_of(wait.ctx, upstream, identity, &paused_for(left), record);
    to_fallback(wait, upstream, &fallback, out, Vec::new(), tokens, record).await
}

/// The name of the route's fallback, when it has one.
fn fallback_name(identity: &Identity) -> Option<&str> {
    identity.route.as_ref().and_then(|r| r.fallback.as_deref())
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
    ctx: &Context,
    upstream: &Upstream,
    identity: &Identity,
    why: &str,
    record: &mut Record,
) -> Arc<Upstream> {
    let fallback = fallback_name(identity)
        .and_then(|f| ctx.setup.upstreams.get(f).cloned())
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
async fn to_fallback<C: Client>(
    wait: &mut Wait<'_, C>,
    upstream: &Upstream,
    fallback: &Arc<Upstream>,
    out: &Outgoing<'_>,
    mut permits: Vec<Permit>,
    tokens: Tokens,
    record: &mut Record,
) -> Result<Sent, Unanswered> {
    permits
        .iter_mut()
        .for_each(|p| p.not_sent_through(own_layers(wait.ctx, upstream)));
    let sent = match wait.take(tokens, fallback, record).await {
        Ok(extra) => absorbing(wait, fallback, out, extra, record).await,
        Err(unanswered) => Err(unanswered),
    };
    match sent {
        Ok(LegEnd::Answered(result, extra)) => {
            permits.extend(extra);
            Ok((result, permits))
        }
        Ok(LegEnd::Paused(left, extra)) => {
            (permits.into_iter().chain(extra)).for_each(Permit::upstream_failed);
            Err(Unanswered::Paused(left))
        }
        Err(unanswered) => {
            permits.into_iter().for_each(Permit::upstream_failed);
            Err(unanswered)
        }
    }
}

/// Forwards the message; a throttle reply of upstream is absorbed when an adaptive layer
/// charged it: the message was not accepted, so it waits again (ahead of later arrivals,
/// within its budget from the final dot) and goes again, never relaying the `454` as if
/// final. A reply that pauses upstream (quota, paused) pauses it, and nothing went.
async fn absorbing<C: Client>(
    wait: &mut Wait<'_, C>,
    upstream: &Arc<Upstream>,
    out: &Outgoing<'_>,
    mut permit: Option<Permit>,
    record: &mut Record,
) -> Result<LegEnd, Unanswered> {
    let (metrics, recent) = (&wait.ctx.services.metrics, &wait.ctx.services.recent);
    loop {
        // Granted in the instant a quota reply paused upstream: it does not go either.
        if let Some(left) = upstream.pause.left() {
            return Ok(LegEnd::Paused(left, permit));
        }
        let upstream_started = Instant::now();
        let result = upstream.forwarder.send(out).await;
        let took = upstream_started.elapsed();
        metrics.upstream(upstream.name(), took);
        // Upstream's refusal of this one message is its word, not an error of upstream.
        let error = (result.as_ref().err())
            .filter(|e| !matches!(e, UpstreamError::Rejected { .. }))
            .map(|e| cause::cut(e.to_string()));
        recent.upstream(upstream.name(), took, error);
        breaker(wait.ctx, upstream, &result);
        let Some(feedback) = result.as_ref().err().and_then(UpstreamError::feedback) else {
            return Ok(LegEnd::Answered(result, permit));
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
            return Ok(LegEnd::Paused(pause, permit));
        }
        let held = match permit {
            Some(held) if held.adaptive() => held,
            _ => return Ok(LegEnd::Answered(result, permit)),
        };
        // A reply about one recipient domain's servers teaches only that domain's buckets.
        let teaches = match upstream.throttles_per_domain() {
            true => Teaches::RcptDomain,
            false => Teaches::Every,
        };
        let again = Tokens::Again(held.throttled(feedback == Feedback::Rate, teaches));
        permit = match wait.take(again, upstream, record).await {
            Ok(Some(permit)) => Some(permit),
            Ok(None) => unreachable!("a message sent again is charged"),
            // Past its budget: `451 4.7.1 Upstream rate limit reached` (nothing was accepted).
            Err(Unanswered::Refused(ThrottleError::Limited { retry_after, .. })) => {
                return Err(Unanswered::UpstreamRate(retry_after))
            }
            Err(unanswered) => return Err(unanswered),
        };
    }
}

/// Counts upstream's answer on its breaker: the change logged, and once it answers again the
/// held messages its failure kept back may go at once.
fn breaker(ctx: &Context, upstream: &Upstream, result: &Result<Accepted, UpstreamError>) {
    let failures = upstream.config.breaker_failures.get();
    match upstream.breaker.record(result, failures) {
        Change::None => {}
        Change::Opened => tracing::warn!(
            target: "mailsluice::upstream",
            upstream = upstream.name(),
            error = %result.as_ref().err().map(ToString::to_string).unwrap_or_default(),
            "upstream.failing: hold-mode messages for it are held at once"
        ),
        Change::Closed => {
            let due =
                (ctx.services.spool.as_ref()).map_or(0, |s| s.upstream_back(upstream.name(), None));
            tracing::info!(
                target: "mailsluice::upstream",
                upstream = upstream.name(),
                due,
                "upstream.answers: the messages its failure kept back go again"
            );
        }
    }
}

/// The message as it goes upstream: the envelope as the client gave it, the pieces, the
/// upstream's own tenant the route sends it as, and the byte budget its copies count in.
pub(super) fn outgoing<'a>(
    ctx: &'a Context,
    envelope: &'a Envelope,
    pieces: &'a [&'a [u8]],
    identity: &'a Identity,
) -> Outgoing<'a> {
    Outgoing {
        envelope,
        pieces,
        upstream_tenant: (identity.route.as_ref()).and_then(|r| r.upstream_tenant.as_deref()),
        room: Some(&ctx.services.buffered),
    }
}
