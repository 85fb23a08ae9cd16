//! After upstream's answer: the tokens settled by it, and the reputation guard told what
//! became of the tenant's message.

use super::verdict::Record;
use crate::message::{Envelope, Outcome};
use crate::policy::Identity;
use crate::reputation::ses_sync::SesTenant;
use crate::state::context::Context;
use crate::throttle::Permit;
use crate::upstream::{Accepted, UpstreamError};

/// A message upstream took, or whose answer never came after it was sent whole, keeps its
/// tokens (given back, they would let the client's retry, or the next message, past the
/// limit: upstream may hold it); any other refusal gives them back.
pub(super) fn tokens(permits: Vec<Permit>, result: &Result<Accepted, UpstreamError>) {
    for permit in permits {
        match result {
            Ok(_) | Err(UpstreamError::Uncertain(_)) => permit.delivered(),
            Err(_) => permit.upstream_failed(),
        }
    }
}

/// What upstream did with the message of `key` (its reputation key): the message it took (and
/// its id there), or the recipients it refused for good.
pub(super) async fn reputation(ctx: &Context, key: &str, envelope: &Envelope, record: &Record) {
    let Some(guard) = &ctx.services.reputation else {
        return;
    };
    match record.outcome {
        Outcome::Delivered | Outcome::Partial => {
            let id = record.upstream_id.as_deref();
            let taken = envelope.rcpts.len().saturating_sub(record.bounced.len());
            guard.forwarded(key, id, taken).await;
            // Recipients an MX host refused after the final dot, as a smarthost's refusal at
            // RCPT is counted.
            if !record.bounced.is_empty() {
                guard.refused_by_upstream(key, &record.bounced).await;
            }
        }
        Outcome::UpstreamPermFail if record.hard_bounce => {
            guard.refused_by_upstream(key, &envelope.rcpts).await;
        }
        _ => {}
    }
}

/// With `[reputation] ses_sync`: the SES tenant that took the message of `key` (its
/// reputation key), for the sync to keep in step with the guard. Only the route's own
/// upstream's tenant (not a fallback's).
pub(super) fn sent_as(ctx: &Context, key: &str, identity: &Identity, record: &Record) {
    let Some(guard) = &ctx.services.reputation else {
        return;
    };
    let taken = matches!(record.outcome, Outcome::Delivered | Outcome::Partial);
    let Some(route) = identity.route.as_ref().filter(|_| taken) else {
        return;
    };
    let (Some(ses_tenant), true) = (&route.upstream_tenant, record.via == route.upstream) else {
        return;
    };
    let upstream = ctx.setup.upstreams.get(&route.upstream);
    if upstream.is_some_and(|u| u.forwarder.offers().standing.is_some()) {
        let to = SesTenant {
            upstream: route.upstream.clone(),
            tenant: ses_tenant.clone(),
        };
        guard.sent_as(key, to);
    }
}
