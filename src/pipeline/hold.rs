//! Hold mode, for a driver that can hold (a session): a message charged to a `mode = "hold"`
//! layer runs its journey as any other; when its tokens do not come within `max_wait_ms` (or
//! upstream is paused, or keeps throttling it, or the relay shuts down before its turn) it is
//! written to the spool and answered `250` instead of `451`. While its key has messages held,
//! it is held at once: it would wait behind them anyway, and the key's messages leave in the
//! order they came.

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
/// or a step says its refusal may be held. Not what upstream answered, nor a refusal for good.
pub(super) fn holdable(ctx: &Context, end: &End) -> bool {
    match end {
        End::Unanswered(Unanswered::Refused(error)) => matches!(
            error,
            ThrottleError::Limited { .. } | ThrottleError::Shutdown
        ),
        End::Unanswered(Unanswered::Paused(_) | Unanswered::UpstreamRate(_)) => true,
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
