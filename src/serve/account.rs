//! Layers with `limit = "account"`: each runs at its SES account's own `MaxSendRate`, read from
//! `GetAccount` at start, after a reload and every [`REFRESH`] (logged when it changes), and
//! when the account's `SentLast24Hours` reaches `Max24HourSend` its upstream is paused until
//! the next read, before SES starts refusing.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Limit;
use crate::state::context::{Context, Live};

/// How often the account's limits are read again.
pub const REFRESH: Duration = Duration::from_secs(300);

/// Reads the accounts' limits for the context in force, then again every [`REFRESH`], until
/// the task is aborted (at the end of `run`).
pub async fn keep(live: Arc<Live>) {
    loop {
        if let Some(ctx) = live.current() {
            refresh(&ctx).await;
        }
        tokio::time::sleep(REFRESH).await;
    }
}

/// One read for every account layer of `ctx`: its limit set from `MaxSendRate` (per its
/// `interval_ms`), its upstream paused when the day's quota is spent. A failed read keeps the
/// limit in force (logged).
pub async fn refresh(ctx: &Context) {
    let layers = ctx.setup.config.throttle.iter().enumerate();
    for (index, layer) in layers.filter(|(_, l)| l.limit == Limit::Account) {
        let name = layer.upstream.as_ref().map(|u| u.get_ref().as_str());
        let Some(upstream) = name.and_then(|n| ctx.setup.upstreams.get(n)) else {
            continue;
        };
        let Some(account) = upstream.forwarder.offers().account else {
            continue;
        };
        let quota = match account.send_quota().await {
            Ok(quota) => quota,
            Err(e) => {
                tracing::warn!(
                    target: "mailsluice::upstream",
                    upstream = upstream.name(),
                    layer = layer.name(),
                    error = %e,
                    "ses.account_unread: the layer keeps its limit"
                );
                continue;
            }
        };
        let per_interval = quota.max_send_rate * layer.interval_ms.get() as f64 / 1000.0;
        let limit = (per_interval.floor() as u64).max(1);
        if ctx.setup.throttle.set_limit(index, limit) {
            tracing::info!(
                target: "mailsluice::upstream",
                upstream = upstream.name(),
                layer = layer.name(),
                max_send_rate = quota.max_send_rate,
                limit,
                "ses.account_rate"
            );
        }
        if quota.day_spent() && upstream.pause.left().is_none() {
            tracing::warn!(
                target: "mailsluice::upstream",
                upstream = upstream.name(),
                sent_last_24_hours = quota.sent_last_24_hours,
                max_24_hour_send = quota.max_24_hour_send,
                "ses.day_quota_reached"
            );
            upstream.pause.pause(REFRESH);
        }
    }
}

/// A reload's new context read at once (its account layers start at 1 a second otherwise).
pub fn after_reload(live: &Live) {
    if let (Ok(runtime), Some(ctx)) = (tokio::runtime::Handle::try_current(), live.current()) {
        runtime.spawn(async move { refresh(&ctx).await });
    }
}
