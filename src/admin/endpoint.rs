//! The admin HTTP endpoint (axum): the status page, liveness, readiness, Prometheus metrics and
//! bucket peeks.
//! It listens apart from SMTP (loopback by default) and never takes tokens. Every answer is
//! read from the live context, so after a reload it shows the config in force.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;

use crate::admin::listener::Bounds;
use crate::admin::sns::{self, SnsRoute};
use crate::admin::status_page::{self, Checks};
use crate::admin::{browser, guard, host, reputation, spool};
use crate::observe::metrics::Metrics;
use crate::spool::Spool;
use crate::state::context::{Context, Live, Services};
use crate::state::deps::Deps;
use crate::state::shutdown::Shutdown;
use crate::upstream::{Checked, Unready};

/// Everything the endpoints read: the services, and the context in force; and the bounds of
/// its connections, from the config it started with (they need a restart to change).
pub struct Admin {
    pub services: Arc<Services>,
    pub live: Arc<Live>,
    pub bounds: Bounds,
}

impl Admin {
    pub fn new(deps: &Deps) -> Arc<Admin> {
        let config = deps.setup.config.admin.clone().unwrap_or_default();
        Arc::new(Admin {
            services: deps.services.clone(),
            live: deps.live.clone(),
            bounds: Bounds::of(&config),
        })
    }

    /// The metrics text of `ctx`: the counters, and the gauges of its throttle and upstream.
    pub fn metrics_text(&self, ctx: &Context) -> String {
        let metrics = &self.services.metrics;
        read_upstream(metrics, ctx);
        metrics.listening(self.services.health.listening());
        if let Some(reputation) = &self.services.reputation {
            metrics.reputation_paused(reputation.paused());
        }
        if let Some(spool) = &self.services.spool {
            let s = spool.summary();
            metrics
                .spool()
                .read(s.messages, s.failed, s.bytes, s.oldest_ms);
        }
        metrics.encode(&ctx.setup.throttle)
    }
}

/// Each upstream's state as metrics: paused or not, failing (its breaker) or not, reachable at its last check, its "too
/// many connections" count, its failed API calls, and SES's word on the SES tenants read.
fn read_upstream(metrics: &Metrics, ctx: &Context) {
    let known: Vec<_> = (ctx.setup.upstreams.iter())
        .filter_map(|u| u.forwarder.offers().standing.map(|s| s.known()))
        .flatten()
        .collect();
    metrics.ses().tenants(known.iter().map(|(_, s)| {
        let aggregate = s.aggregate.as_deref().unwrap_or("UNKNOWN");
        (aggregate, s.impact.as_deref().unwrap_or("NONE"))
    }));
    for upstream in ctx.setup.upstreams.iter() {
        metrics
            .upstreams()
            .paused(upstream.name(), upstream.pause.is_paused());
        metrics
            .upstreams()
            .breaker(upstream.name(), upstream.breaker.failing_since());
        if let Some(up) = upstream.last_check_ok() {
            metrics.upstreams().up(upstream.name(), up);
        }
        let crowded = upstream.forwarder.offers().crowded;
        let crowded = crowded.map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed));
        metrics.upstream_crowded(upstream.name(), crowded);
        if let Some(tokens) = upstream.forwarder.offers().tokens {
            let read = |count: &std::sync::atomic::AtomicU64| {
                count.load(std::sync::atomic::Ordering::Relaxed)
            };
            (metrics.tokens()).requests(
                upstream.name(),
                read(&tokens.issued),
                read(&tokens.failed),
            );
        }
        for failed in upstream
            .forwarder
            .offers()
            .failed_calls
            .into_iter()
            .flatten()
        {
            let total = failed.count.load(std::sync::atomic::Ordering::Relaxed);
            metrics
                .ses()
                .calls_failed(upstream.name(), failed.operation, total);
        }
    }
}

/// Every upstream checked at once (each check is bounded by its upstream's timeout, and
/// reused for `CHECK_MAX_AGE`: see `Upstream::check`).
async fn check_upstreams(ctx: &Context) -> Vec<(String, Checked)> {
    let checks: Vec<_> = (ctx.setup.upstreams.iter())
        .map(|upstream| {
            let upstream = upstream.clone();
            let name = upstream.name().to_string();
            (name, tokio::spawn(async move { upstream.check().await }))
        })
        .collect();
    let mut results = Vec::with_capacity(checks.len());
    for (name, check) in checks {
        let result = check.await.unwrap_or_else(|e| Err(Unready(e.to_string())));
        results.push((name, result));
    }
    results
}

/// Whether mail can go: every route reaches its upstream or its fallback (without routes,
/// the first upstream). An unreachable upstream no route needs does not make the relay
/// unready, nor a fallback while its primary is up: replicas share them, and pulling every
/// replica out of the load balancer for it would stop all mail.
fn upstreams_ready(ctx: &Context, checks: &[(String, Checked)]) -> Result<(), UpstreamsUnready> {
    let ok = |name: &str| checks.iter().any(|(n, r)| n == name && r.is_ok());
    let routes = &ctx.setup.config.routes;
    let needed = match routes.is_empty() {
        true => ok(ctx.setup.upstreams.first().name()),
        false => routes.iter().all(|r| {
            ok(r.upstream.get_ref()) || r.fallback.as_ref().is_some_and(|f| ok(f.get_ref()))
        }),
    };
    if needed {
        return Ok(());
    }
    let failing = (checks.iter())
        .filter_map(|(name, r)| r.as_ref().err().map(|e| (name.clone(), e.to_string())))
        .collect();
    Err(UpstreamsUnready { failing })
}

/// The relay cannot take mail for want of upstreams: every upstream whose check failed, by
/// name, with why.
#[derive(Debug, thiserror::Error)]
struct UpstreamsUnready {
    failing: Vec<(String, String)>,
}

/// `eu: timed out; backup: greeting was "554 go away"`.
impl std::fmt::Display for UpstreamsUnready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, why)) in self.failing.iter().enumerate() {
            let separator = if i == 0 { "" } else { "; " };
            write!(f, "{separator}{name}: {why}")?;
        }
        Ok(())
    }
}

/// A check as `/readyz` shows it: `{"ok": true}`, or `{"ok": false, "error": ...}`.
fn verdict<E: std::fmt::Display>(check: &Result<(), E>) -> serde_json::Value {
    match check {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "error": e.to_string()}),
    }
}

/// The answer in the moment before `run` installs the first context.
fn starting() -> Response {
    let body = json!({"ready": false, "error": "starting"});
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

pub fn router(admin: Arc<Admin>) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/buckets/{layer}/{key}", get(bucket))
        .merge(reputation::routes(admin.live.clone()))
        .merge(spool::routes(admin.live.clone()))
        .merge(sns::routes(SnsRoute {
            live: admin.live.clone(),
            verifier: admin.services.sns.clone(),
            metrics: admin.services.metrics.clone(),
        }))
        // The last layer runs first: the Host, then where a change comes from, then who.
        .layer(axum::middleware::from_fn_with_state(
            admin.live.clone(),
            guard::authenticate,
        ))
        .layer(axum::middleware::from_fn(browser::check))
        .layer(axum::middleware::from_fn_with_state(
            admin.live.clone(),
            host::check,
        ))
        .with_state(admin)
}

/// Serves until `shutdown` fires, within `[admin]`'s bounds (see `listener`).
pub async fn serve(
    listener: TcpListener,
    admin: Arc<Admin>,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let bounds = admin.bounds;
    super::listener::serve(listener, router(admin), bounds, shutdown).await
}

/// 200 when this replica can take mail: its config loaded, its listeners accepting, and its
/// spool (when it has one) writable: that one is this replica's own. Upstream
/// and Redis are checked and shown (each upstream, the routes' verdict, a pause), and make it
/// 503 only with `[admin] ready_requires_upstream`: they are shared by every replica, so one
/// hiccup would pull them all out of the load balancer at once, and clients would find refused
/// connections, which many do not retry, instead of a `451` they may.
async fn readyz(State(admin): State<Arc<Admin>>) -> Response {
    let Some(ctx) = admin.live.current() else {
        return starting();
    };
    let listening = admin.services.health.listening();
    let checks = check_upstreams(&ctx).await;
    let upstream = upstreams_ready(&ctx, &checks);
    let store = ctx.setup.throttle.check_store().await;
    let strict = (ctx.setup.config.admin.as_ref()).is_some_and(|a| a.ready_requires_upstream);
    let reachable = upstream.is_ok() && store.as_ref().is_none_or(|s| s.is_ok());
    let spool = match &admin.services.spool {
        Some(spool) => Some(spool_writable(spool).await),
        None => None,
    };
    let ready = listening && spool.as_ref().is_none_or(|s| s.is_ok()) && (reachable || !strict);
    let each: serde_json::Map<String, serde_json::Value> =
        (ctx.setup.upstreams.iter().zip(&checks))
            .map(|(u, (name, check))| {
                let mut state = verdict(&check.clone().map(|_| ()));
                if let Ok(Some(detail)) = check {
                    state["detail"] = json!(detail);
                }
                // Named, not judged: a tenant SES does not know stops only its own messages.
                if let Some(identities) = u.forwarder.offers().identities {
                    let unknown = identities.unknown_tenants();
                    if !unknown.is_empty() {
                        let named = format!("SES tenants unknown to SES: {}", unknown.join(", "));
                        state["detail"] = match state["detail"].as_str() {
                            Some(detail) => json!(format!("{detail}; {named}")),
                            None => json!(named),
                        };
                    }
                    state["unknown_tenants"] = json!(unknown);
                }
                // A quota pause is not unreadiness: the relay still answers (with 451s), and
                // every replica would be paused alike.
                state["paused"] = json!(u.pause.is_paused());
                (name.clone(), state)
            })
            .collect();
    let mut body = json!({
        "ready": ready,
        "listening": listening,
        "upstream": verdict(&upstream),
        "upstreams": each,
        "paused": ctx.setup.upstreams.iter().any(|u| u.pause.is_paused()),
        "requires_upstream": strict,
    });
    if let Some(store) = &store {
        body["redis"] = verdict(store);
    }
    if let Some(spool) = &spool {
        body["spool"] = verdict(spool);
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Whether the spool can be written: a relay whose hold-mode layers cannot hold answers
/// `452` to what they would hold, and should take no mail.
async fn spool_writable(spool: &Spool) -> Result<(), &'static str> {
    match spool.writable().await {
        true => Ok(()),
        false => Err("the spool cannot be written"),
    }
}

/// The status page: what the relay does now, in HTML (see `status_page`).
async fn status_page(State(admin): State<Arc<Admin>>) -> Response {
    let Some(ctx) = admin.live.current() else {
        return starting();
    };
    let checks = Checks {
        upstreams: check_upstreams(&ctx).await,
        store: ctx.setup.throttle.check_store().await,
        reputation: status_page::reputation_view(&ctx).await,
        ses_tenants: (ctx.services.reputation.as_ref())
            .map_or_else(Vec::new, |guard| reputation::ses_tenants(&ctx, guard)),
        spool: match &admin.services.spool {
            Some(spool) => Some(spool_writable(spool).await),
            None => None,
        },
        spool_unlisted: match &admin.services.spool {
            Some(spool) => spool.refresh().await.err().map(|e| e.to_string()),
            None => None,
        },
    };
    let page = status_page::render(
        &ctx,
        &admin.services.health,
        &admin.services.recent,
        &checks,
    );
    axum::response::Html(page).into_response()
}

async fn metrics(State(admin): State<Arc<Admin>>) -> Response {
    let Some(ctx) = admin.live.current() else {
        return starting();
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        admin.metrics_text(&ctx),
    )
        .into_response()
}

async fn bucket(
    State(admin): State<Arc<Admin>>,
    Path((layer, key)): Path<(String, String)>,
) -> Response {
    let Some(ctx) = admin.live.current() else {
        return starting();
    };
    // A redis layer is read from Redis (the state every replica shares).
    match ctx.setup.throttle.peek_async(&layer, &key).await {
        Some(Ok(peek)) => Json(peek).into_response(),
        Some(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": e.to_string()})),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no layer named {layer:?}")})),
        )
            .into_response(),
    }
}
