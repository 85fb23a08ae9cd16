//! The admin HTTP endpoint (axum): liveness, readiness, Prometheus metrics and bucket peeks.
//! It listens apart from SMTP (loopback by default) and never takes tokens.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;

use crate::metrics::Metrics;
use crate::reload::Live;
use crate::shutdown::Shutdown;
use crate::throttle::Throttle;
use crate::upstream::Forwarder;

/// What readiness depends on besides upstream: whether the SMTP listeners are accepting.
#[derive(Debug, Default)]
pub struct Health {
    listening: AtomicBool,
}

impl Health {
    pub fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::SeqCst);
    }

    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }
}

/// Everything the endpoints read. `throttle` and `forwarder` are the ones the relay started
/// with; after a reload the current ones come from `live`.
pub struct Admin {
    pub throttle: Arc<Throttle>,
    pub metrics: Arc<Metrics>,
    pub forwarder: Arc<dyn Forwarder>,
    pub health: Arc<Health>,
    pub live: Arc<Live>,
}

impl Admin {
    fn current(&self) -> (Arc<Throttle>, Arc<dyn Forwarder>) {
        match self.live.current() {
            Some(ctx) => (ctx.throttle.clone(), ctx.forwarder.clone()),
            None => (self.throttle.clone(), self.forwarder.clone()),
        }
    }
}

pub fn router(admin: Arc<Admin>) -> Router {
    Router::new()
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
    let (throttle, forwarder) = admin.current();
    let listening = admin.health.listening();
    let upstream = forwarder.check().await;
    let store = throttle.check_store().await;
    let ready = listening && upstream.is_ok() && store.as_ref().is_none_or(|s| s.is_ok());
    let verdict = |check: &Result<(), String>| match check {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "error": e}),
    };
    let mut body = json!({
        "ready": ready,
        "listening": listening,
        "upstream": verdict(&upstream),
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

async fn metrics(State(admin): State<Arc<Admin>>) -> Response {
    let text = admin.metrics.encode(&admin.current().0);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn bucket(
    State(admin): State<Arc<Admin>>,
    Path((layer, key)): Path<(String, String)>,
) -> Response {
    match admin.throttle.peek(&layer, &key) {
        Some(peek) => Json(peek).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": format!("no layer named {layer:?}")})),
        )
            .into_response(),
    }
}
