//! Hold mode, for a driver that can hold (a session): a message charged to a `mode = "hold"`
//! layer runs its journey as any other; when it ends in anything temporary (its tokens did not
//! come within `max_wait_ms`, upstream is paused, unreachable, failing for now or lost its
//! answer, the relay shuts down before its turn) it is written to the spool and answered `250`
//! instead of `4xx`. Upstream's `5xx` stays the client's answer. While its key has messages
//! held, or its upstream's breaker is open (`upstream::breaker`), it is held at once: it would
//! wait behind them anyway, and the key's messages leave in the order they came. The table of
//! every end is in docs/hold.md. A key past `max_held`, or past its share of the spool, gets
//! the layer's `451`.

use std::sync::Arc;
use std::time::Duration;

use super::admission::{self, NotAdmitted, Paused, Scope};
use super::message::Message;
use super::verdict::{End, Record, Unanswered, Verdict};
use crate::config::{Action, Mode};
use crate::policy::Identity;
use crate::spool::{HeldKey, Origin, Spool, ToHold};
use crate::state::context::Context;
use crate::throttle::ThrottleError;
use crate::upstream::Upstream;

/// Where a message would be held: the spool, its first hold-mode layer's key, its bounds.
pub(super) struct Holding {
    spool: Arc<Spool>,
    key: HeldKey,
    max_held: usize,
    /// The hint of a refusal at `max_held`: about when the key's next message is released.
    retry_after: Duration,
}

impl Holding {
    /// The first hold-mode layer the message is charged to, when the relay has a spool.
    pub fn of(ctx: &Context, identity: &Identity) -> Option<Holding> {
        let spool = ctx.services.spool.as_ref()?;
        let (charge, layer) = (identity.charges.iter())
            .map(|c| (c, &ctx.setup.config.throttle[c.layer]))
            .find(|(_, layer)| *layer.mode.get_ref() == Mode::Hold)?;
        let per_message = layer.interval_ms.get() / layer.limit.get().max(1);
        Some(Holding {
            spool: spool.clone(),
            key: HeldKey {
                layer: layer.name().to_string(),
                key: charge.key.clone(),
            },
            max_held: layer.max_held.get(),
            retry_after: Duration::from_millis(per_message.max(1)),
        })
    }

    /// Whether the key has messages held: this one is held behind them at once.
    pub fn at_once(&self) -> bool {
        self.spool.holds(&self.key)
    }
}

/// A message whose key has messages held: held behind them, once the checks that need no
/// route let it go (a loop stays refused; a tenant's pause too, unless it holds).
pub(super) async fn at_once(
    ctx: &Context,
    holding: Holding,
    message: &Message<'_>,
    it: ToSpool<'_>,
) -> Verdict {
    let record = Record::new(ctx, &message.identity.charges);
    let record = match admission::of_message(ctx, message).await {
        Ok(()) => record,
        Err(refusal) => {
            let refused = Verdict::refused(refusal, record);
            if !holdable(ctx, &refused.end) {
                return refused;
            }
            refused.record
        }
    };
    holding.hold(ctx, message, it, record).await
}

/// Whether a journey's end lets its message be held: its tokens did not come in time (or
/// before the shutdown's grace ends), upstream or its tenant there is paused, upstream kept
/// throttling it, or (`[reputation] action = "hold"`) the reputation guard paused its tenant,
/// or a step says its refusal may be held; and every temporary end at upstream (unreachable,
/// its `4xx` at any step, the relay's credentials refused, no answer after the final dot).
/// Not upstream's refusal for good (`5xx`), nor the relay's.
pub(super) fn holdable(ctx: &Context, end: &End) -> bool {
    match end {
        End::Upstream(Err(error)) => !error.for_good(),
        End::Unanswered(Unanswered::Refused(error)) => matches!(
            error,
            ThrottleError::Limited { .. } | ThrottleError::Shutdown
        ),
        End::Unanswered(
            Unanswered::Paused(_) | Unanswered::UpstreamRate(_) | Unanswered::UpstreamFailing(_),
        ) => true,
        End::Refused(NotAdmitted::Paused(Paused { scope, .. })) => match scope {
            Scope::Upstream | Scope::UpstreamTenant(_) => true,
            Scope::Tenant { reject, .. } => {
                let action = ctx.services.reputation.as_ref().map(|g| g.action);
                !reject && action == Some(Action::Hold)
            }
        },
        End::Refused(NotAdmitted::Step(refusal)) => refusal.holdable,
        _ => false,
    }
}

/// The upstream of a message's route when its breaker is open and no fallback carries the
/// route's messages meanwhile (with one, the journey goes on: the fallback takes what the
/// upstream cannot).
pub(super) fn failing_upstream(ctx: &Context, identity: &Identity) -> Option<Arc<Upstream>> {
    let route = identity.route.as_ref().filter(|r| r.fallback.is_none())?;
    let upstream = ctx.setup.upstreams.get(&route.upstream)?;
    upstream.breaker.is_open().then(|| upstream.clone())
}

/// A held message whose upstream is failing: whether it is the probe (it tries upstream), or
/// else the time until the next probe may go.
pub(super) fn probe(upstream: &Upstream) -> Result<(), Duration> {
    let interval = Duration::from_millis(upstream.config.breaker_probe_ms.get());
    match upstream.breaker.may_try(interval) {
        true => Ok(()),
        false => Err(upstream.breaker.next_probe(interval).unwrap_or(interval)),
    }
}

/// What the spool keeps of a message besides its envelope and bytes: our `Received:` field
/// (without the route's fields: the route is read again at release), who gave it.
pub(super) struct ToSpool<'a> {
    pub received: &'a [u8],
    pub origin: Origin,
}

impl Holding {
    /// Holds `message` (`record`: its journey's, or a new one when held at once): its verdict.
    pub async fn hold(
        self,
        ctx: &Context,
        message: &Message<'_>,
        it: ToSpool<'_>,
        mut record: Record,
    ) -> Verdict {
        let (holding, id) = (self, message.id);
        record.layer.clone_from(&holding.key.layer);
        record.key.clone_from(&holding.key.key);
        let held = holding.spool.hold(ToHold {
            id,
            key: holding.key,
            envelope: message.envelope,
            origin: it.origin,
            received: it.received,
            key_fields: b"",
            body: message.body,
            max_held: Some(holding.max_held),
            report: false,
        });
        match held.await {
            Ok(()) => {
                ctx.services.metrics.spool().held(false);
                Verdict::held(id.to_string(), record)
            }
            Err(refusal) => Verdict::not_held(refusal, holding.retry_after, record),
        }
    }
}
