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

use crate::context::{Context, Deps, Health, Live};
use crate::metrics::Metrics;
use crate::recent::Recent;
use crate::shutdown::Shutdown;
use crate::status_page::{self, Checks};

/// Everything the endpoints read.
pub struct Admin {
    pub metrics: Arc<Metrics>,
    pub recent: Arc<Recent>,
    pub health: Arc<Health>,
    pub live: Arc<Live>,
}

impl Admin {
    pub fn new(deps: &Deps) -> Arc<Admin> {
        Arc::new(Admin {
            metrics: deps.metrics.clone(),
            recent: deps.recent.clone(),
            health: deps.health.clone(),
            live: deps.live.clone(),
        })
    }

    /// The metrics text of `ctx`: the counters, and the gauges of its throttle and upstream.
    pub fn metrics_text(&self, ctx: &Context) -> String {
        read_upstream(&self.metrics, ctx);
        self.metrics.encode(&ctx.throttle)
    }
}

/// The upstream's state as metrics: paused or not, and its "too many connections" count.
fn read_upstream(metrics: &Metrics, ctx: &Context) {
    metrics.upstream_paused(ctx.pause.is_paused());
    metrics.upstream_crowded(ctx.forwarder.crowded());
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
        .with_state(admin)
}

/// Serves until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    admin: Arc<Admin>,
    mut shutdown: Shutdown,
) -> std::io::Result<()> {
    axum::serve(listener, router(admin))
        .with_graceful_shutdown(async move { shutdown.wait().await })
        .await
}

/// 200 when the relay can take mail: listening and upstream reachable now (Redis too, once
/// a layer uses it); 503 with a JSON body saying what is not.
async fn readyz(State(admin): State<Arc<Admin>>) -> Response {
    let Some(ctx) = admin.live.current() else {
        return starting();
    };
    let listening = admin.health.listening();
    let upstream = ctx.forwarder.check().await;
    let store = ctx.throttle.check_store().await;
    let ready = listening && upstream.is_ok() && store.as_ref().is_none_or(|s| s.is_ok());
    let verdict = |check: &Result<(), String>| match check {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "error": e}),
    };
    let mut body = json!({
        "ready": ready,
        "listening": listening,
        "upstream": verdict(&upstream),
        // A quota pause is not unreadiness: the relay still answers (with 451s), and every
        // replica would be paused alike.
        "paused": ctx.pause.is_paused(),
    });
    if let Some(store) = &store {
        body["redis"] = verdict(store);
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// The status page: what the relay does now, in HTML (see `status_page`).
async fn status_page(State(admin): State<Arc<Admin>>) -> Response {
    let Some(ctx) = admin.live.current() else {
        return starting();
    };
    let checks = Checks {
        upstream: ctx.forwarder.check().await,
        store: ctx.throttle.check_store().await,
    };
    let page = status_page::render(&ctx, &admin.health, &admin.recent, &checks);
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
    match ctx.throttle.peek_async(&layer, &key).await {
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
