//! What the guard tells the tenant's webhooks: `bounced` and `complained` for SES's events
//! attributed to it, `suppressed` for each address it suppressed for it, `paused` and
//! `resumed` when its standing changes. Each is sent where the guard learns it once: the
//! replica that took the SES event (a repeat of one counts nothing and tells nothing), the
//! one that saw the tenant's change (with `[redis]`, the change is flipped in Redis once).

use super::events::{Event, Kind};
use super::ledger::{Breach, Change};
use crate::webhook::event::EventType;
use crate::webhook::Webhooks;

/// A change of `tenant`'s standing.
pub(super) fn changed(webhooks: &Webhooks, tenant: &str, change: Change, breach: Option<&Breach>) {
    let kind = match change {
        Change::Paused => EventType::Paused,
        Change::Resumed => EventType::Resumed,
        Change::None => return,
    };
    if !webhooks.wants(tenant, kind) {
        return;
    }
    let mut event = webhooks.event(kind, tenant);
    if let (EventType::Paused, Some(breach)) = (kind, breach) {
        event.reason = Some(breach.kind.as_str());
        event.rate = Some(breach.rate);
        event.limit = Some(breach.limit);
    }
    webhooks.emit(event);
}

/// SES's bounce or complaint `ses` counted for `tenant`; its addresses `suppressed` or not.
pub(super) fn feedback(webhooks: &Webhooks, tenant: &str, ses: &Event, suppressed: bool) {
    let kind = match ses.kind {
        Kind::Bounce => EventType::Bounced,
        Kind::Complaint => EventType::Complained,
    };
    if webhooks.wants(tenant, kind) {
        let mut event = webhooks.event(kind, tenant);
        event.upstream_message_id = Some(ses.message_id.clone());
        event.to = ses.recipients.clone();
        event.diagnostic = ses.diagnostic.clone();
        webhooks.emit(event);
    }
    if suppressed {
        addresses(
            webhooks,
            tenant,
            &ses.recipients,
            ses.kind,
            Some(&ses.message_id),
        );
    }
}

/// `rcpts` of `tenant`'s message suppressed for `reason`.
pub(super) fn addresses(
    webhooks: &Webhooks,
    tenant: &str,
    rcpts: &[String],
    reason: Kind,
    upstream_id: Option<&str>,
) {
    if !webhooks.wants(tenant, EventType::Suppressed) {
        return;
    }
    for rcpt in rcpts {
        let mut event = webhooks.event(EventType::Suppressed, tenant);
        event.upstream_message_id = upstream_id.map(str::to_string);
        event.to = vec![rcpt.clone()];
        event.reason = Some(reason.as_str());
        webhooks.emit(event);
    }
}
