//! The sender against the sending identities of the upstream's tenant it is sent as (SES): a
//! message SES would refuse after its whole body is refused here, before its tokens. Here a
//! tenant upstream never read yet is read first (the message waits for that one read, bounded
//! by the upstream's timeout). Asked at MAIL too, from what is known by then, never waiting
//! (`smtp/mail.rs`, with the same words).

use super::{Message, NotAdmitted};
use crate::message::Outcome;
use crate::reply::{self, Reply};
use crate::state::context::Context;
use crate::upstream::{IdentityCheck, IdentityRefusal, Upstream};

/// A sender that is no identity of the tenant is refused for good; a tenant upstream does not
/// know must be created there first: the client keeps the message.
pub(super) fn outcome(refusal: &IdentityRefusal) -> Outcome {
    match refusal {
        IdentityRefusal::NotIdentity { .. } => Outcome::IdentityRefused,
        IdentityRefusal::UnknownTenant { .. } => Outcome::UpstreamTenantUnknown,
    }
}

/// Go, or why its sender may not send as the route's upstream tenant.
pub(super) async fn check(
    ctx: &Context,
    message: &Message<'_>,
    upstream: &Upstream,
) -> Result<(), NotAdmitted> {
    let identity = message.identity;
    let tenant = (identity.route.as_ref()).and_then(|r| r.upstream_tenant.as_deref());
    let Some(tenant) = tenant else {
        return Ok(());
    };
    // SES takes the From: field's address when the envelope sender is null.
    let senders = match &message.envelope.from {
        Some(from) => std::slice::from_ref(from),
        None => identity.from.as_slice(),
    };
    let Some(identities) = upstream.forwarder.offers().identities else {
        return Ok(());
    };
    for sender in senders {
        let check = identities.check_read(tenant, sender).await;
        verdict(ctx, check).map_err(NotAdmitted::Identity)?;
    }
    Ok(())
}

/// Whether `sender` may send as `upstream`'s tenant `tenant`, from what the upstream learned
/// before (at MAIL, when the route is known by then): never a wait for upstream. One whose
/// identities are not known goes, for upstream to judge, and is counted.
pub fn sender_identity(
    ctx: &Context,
    upstream: &Upstream,
    tenant: &str,
    sender: &str,
) -> Result<(), IdentityRefusal> {
    let Some(identities) = upstream.forwarder.offers().identities else {
        return Ok(());
    };
    verdict(ctx, identities.check(tenant, sender))
}

/// What a check means for the message: an unchecked sender goes, counted.
fn verdict(ctx: &Context, check: IdentityCheck) -> Result<(), IdentityRefusal> {
    match check {
        IdentityCheck::Allowed => Ok(()),
        IdentityCheck::Unchecked => {
            ctx.services.metrics.ses().identity_unchecked();
            Ok(())
        }
        IdentityCheck::Refused(refusal) => Err(refusal),
    }
}

/// The words MAIL uses too.
pub(super) fn reply(refusal: &IdentityRefusal) -> Reply {
    reply::identity_refused(refusal)
}
