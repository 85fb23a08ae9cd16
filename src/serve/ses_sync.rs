//! `[reputation] ses_sync = true`: the reputation guard and SES's own view of each SES tenant
//! kept in step, by one task, never on a client's path.
//!
//! - Each SES tenant a key's messages went to (noted by the guard) is read from SES when first
//!   seen and every `ses_refresh_ms` (`GetReputationEntity`, `GetTenant` once for its ARN):
//!   SES's statuses and reputation impact are kept by the forwarder, which pauses the tenant's
//!   messages while the aggregate is `DISABLED`.
//! - A tenant whose key the guard pauses is set `DISABLED` at SES (customer-managed status),
//!   and `ENABLED` again once no key of it is paused (resumed by its rates or an operator);
//!   `REINSTATED` (an operator's word at SES) is left alone unless the guard pauses. Looked at
//!   when the guard notes a change, and at every refresh, so a failed write is tried again.
//! - An address the guard suppresses for a key goes on its SES tenant's suppression list
//!   (`PutSuppressedDestination` with `TenantName`); a failed write waits for the next pass.
//!
//! Every call is bounded by the forwarder (its `timeout_ms`, 4 calls at once); a failure is
//! logged here and counted by the forwarder (`mailsluice_ses_calls_failed_total`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Action;
use crate::reputation::ses_sync::{PendingSuppression, SesSync, SesTenant};
use crate::reputation::{Kind, Reputation};
use crate::state::context::{Context, Live};
use crate::upstream::{SuppressReason, TenantStanding, TenantStatus};

/// Starts the task when `[reputation] ses_sync` is on; it runs until aborted (at the end of
/// `run`).
pub fn start(live: &Arc<Live>, ctx: &Context) -> Option<tokio::task::JoinHandle<()>> {
    let guard = ctx.services.reputation.clone()?;
    let config = ctx.setup.config.reputation.as_ref()?;
    guard.ses_sync()?;
    let refresh = Duration::from_millis(config.ses_refresh_ms.get());
    Some(tokio::spawn(keep(live.clone(), guard, refresh)))
}

/// A full pass every `refresh`; between them, a pass over what the guard noted.
async fn keep(live: Arc<Live>, guard: Arc<Reputation>, refresh: Duration) {
    let sync = guard.ses_sync().expect("started with ses_sync");
    let mut next = Instant::now() + refresh;
    loop {
        let full = tokio::select! {
            _ = tokio::time::sleep_until(next) => true,
            _ = sync.wanted() => false,
        };
        if full {
            next = Instant::now() + refresh;
        }
        if let Some(ctx) = live.current() {
            pass(&ctx, &guard, sync, full).await;
        }
    }
}

/// One pass: the tenants of the keys noted (every mapped tenant when `full`) read when due and
/// set as the guard says; then the suppressions waiting.
async fn pass(ctx: &Context, guard: &Reputation, sync: &SesSync, full: bool) {
    let mapped = sync.mapped();
    let changed: BTreeSet<String> = sync.take_changed().into_iter().collect();
    let mut tenants: BTreeMap<SesTenant, Vec<String>> = BTreeMap::new();
    for (key, to) in &mapped {
        tenants.entry(to.clone()).or_default().push(key.clone());
    }
    let due = (tenants.iter()).filter(|(_, keys)| full || keys.iter().any(|k| changed.contains(k)));
    let steps = due.map(|(to, keys)| in_step(ctx, guard, to, keys, full));
    futures_util::future::join_all(steps).await;
    suppress(ctx, sync).await;
}

/// SES tenant `to` (of `keys`) read when `read` or never read, then set `DISABLED` while a key
/// of it is paused by the guard, `ENABLED` once none is.
async fn in_step(ctx: &Context, guard: &Reputation, to: &SesTenant, keys: &[String], read: bool) {
    let Some(upstream) = ctx.setup.upstreams.get(&to.upstream).cloned() else {
        return;
    };
    let Some(standing) = upstream.forwarder.offers().standing else {
        return;
    };
    let tenant = to.tenant.as_str();
    let known = standing.known().into_iter().find(|(t, _)| t == tenant);
    let status = match (read, known) {
        (false, Some((_, status))) => Some(status),
        (_, before) => read_status(standing, to, before.map(|(_, s)| s)).await,
    };
    let mut paused = false;
    for key in keys {
        paused |= guard.standing(key).await.is_some() && guard.action != Action::Warn;
    }
    let customer = status.as_ref().and_then(|s| s.customer_managed.as_deref());
    let enable = match (paused, customer) {
        (true, Some("DISABLED")) => return,
        (true, _) => false,
        (false, Some("DISABLED")) => true,
        (false, _) => return,
    };
    match standing.set_sending(tenant, enable).await {
        Ok(()) => tracing::warn!(
            target: "mailsluice::reputation",
            upstream = to.upstream.as_str(),
            ses_tenant = tenant,
            sending = if enable { "ENABLED" } else { "DISABLED" },
            "ses.tenant_status_set"
        ),
        Err(e) => tracing::warn!(
            target: "mailsluice::reputation",
            upstream = to.upstream.as_str(),
            ses_tenant = tenant,
            error = %e,
            "ses.sync_failed: tried again at the next refresh"
        ),
    }
}

/// SES's word on `to`, logged when its aggregate turns `DISABLED` or back; on a failed read,
/// what was known `before`.
async fn read_status(
    standing: &dyn TenantStanding,
    to: &SesTenant,
    before: Option<TenantStatus>,
) -> Option<TenantStatus> {
    let tenant = to.tenant.as_str();
    let status = match standing.read(tenant).await {
        Ok(status) => status,
        Err(e) => {
            tracing::warn!(
                target: "mailsluice::reputation",
                upstream = to.upstream.as_str(),
                ses_tenant = tenant,
                error = %e,
                "ses.sync_failed: tried again at the next refresh"
            );
            return before;
        }
    };
    let was = before.as_ref().is_some_and(TenantStatus::disabled);
    if status.disabled() != was {
        tracing::warn!(
            target: "mailsluice::reputation",
            upstream = to.upstream.as_str(),
            ses_tenant = tenant,
            aggregate = status.aggregate.as_deref().unwrap_or(""),
            impact = status.impact.as_deref().unwrap_or(""),
            "ses.tenant_sending_status"
        );
    }
    Some(status)
}

/// The suppressions waiting, written to SES; those that failed wait for the next pass.
async fn suppress(ctx: &Context, sync: &SesSync) {
    let pending = sync.take_pending();
    if pending.is_empty() {
        return;
    }
    let writes = pending.iter().map(|one| async move {
        let upstream = ctx.setup.upstreams.get(&one.to.upstream)?;
        let standing = upstream.forwarder.offers().standing?;
        let reason = match one.reason {
            Kind::Bounce => SuppressReason::Bounce,
            Kind::Complaint => SuppressReason::Complaint,
        };
        let written = standing
            .suppress(&one.to.tenant, &one.address, reason)
            .await;
        written.err().map(|e| (one.clone(), e))
    });
    let failed: Vec<(PendingSuppression, _)> = futures_util::future::join_all(writes)
        .await
        .into_iter()
        .flatten()
        .collect();
    if let Some((_, e)) = failed.first() {
        tracing::warn!(
            target: "mailsluice::reputation",
            failed = failed.len(),
            error = %e,
            "ses.suppression_unwritten: tried again at the next refresh"
        );
    }
    sync.retry(failed.into_iter().map(|(one, _)| one).collect());
}
