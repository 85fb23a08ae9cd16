//! The reputation guard's endpoints: each tenant's standing (with `ses_sync`, SES's word on
//! its SES tenant), an operator's resume, and the suppression of one address (read, lifted). 404 when `[reputation]` is not set; 503 when
//! its state is in Redis and Redis does not answer.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use serde::Serialize;

use crate::redis::RedisUnavailable;
use crate::reputation::ses_sync::SesTenant;
use crate::reputation::Reputation;
use crate::state::context::{Context, Live};
use crate::upstream::TenantStatus;

/// These routes, on the live context (the endpoint merges them).
pub fn routes<S>(live: Arc<Live>) -> Router<S> {
    Router::new()
        .route("/reputation", get(standings))
        .route("/reputation/{key}/resume", post(resume))
        .route(
            "/suppressions/{address}",
            get(suppression).delete(unsuppress),
        )
        .with_state(live)
}

fn guard(live: &Live) -> Option<Arc<Reputation>> {
    live.current().and_then(|c| c.services.reputation.clone())
}

fn off() -> Response {
    let body = json!({"error": "the reputation guard is off (no [reputation])"});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

/// `GET /reputation`: every tenant counted in the window, and the guard's totals.
async fn standings(State(live): State<Arc<Live>>) -> Response {
    let Some(guard) = guard(&live) else {
        return off();
    };
    let (tenants, suppressed) = match (guard.standings().await, guard.suppressed_count().await) {
        (Ok(tenants), Ok(suppressed)) => (tenants, suppressed),
        (Err(e), _) | (_, Err(e)) => return unavailable(&e),
    };
    let mut body = json!({
        "paused": tenants.iter().filter(|s| s.paused).count(),
        "tenants": tenants,
        "suppressed": suppressed,
        "unattributed": guard.unattributed(),
        "tracked_messages": guard.tracked(),
        "shared": guard.is_shared(),
    });
    if let (Some(ctx), true) = (live.current(), guard.ses_sync().is_some()) {
        body["ses_tenants"] = json!(ses_tenants(&ctx, &guard));
    }
    Json(body).into_response()
}

/// One key's SES tenant and SES's word on it (`null` until first read), with `ses_sync`.
#[derive(Debug, Clone, Serialize)]
pub struct SesTenantView {
    pub key: String,
    pub upstream: String,
    pub ses_tenant: String,
    pub customer_managed_status: Option<String>,
    pub aws_ses_managed_status: Option<String>,
    pub sending_status_aggregate: Option<String>,
    pub reputation_impact: Option<String>,
}

/// Each key whose messages went to an SES tenant, with what SES last said of that tenant.
pub fn ses_tenants(ctx: &Context, guard: &Reputation) -> Vec<SesTenantView> {
    let Some(sync) = guard.ses_sync() else {
        return Vec::new();
    };
    let known = |to: &SesTenant| {
        let upstream = ctx.setup.upstreams.get(&to.upstream)?;
        let standing = upstream.forwarder.offers().standing?;
        let mut known = standing.known().into_iter();
        known.find(|(t, _)| *t == to.tenant).map(|(_, s)| s)
    };
    (sync.mapped().into_iter())
        .map(|(key, to)| {
            let status = known(&to);
            let field = |f: fn(&TenantStatus) -> &Option<String>| {
                status.as_ref().and_then(|s| f(s).clone())
            };
            SesTenantView {
                customer_managed_status: field(|s| &s.customer_managed),
                aws_ses_managed_status: field(|s| &s.upstream_managed),
                sending_status_aggregate: field(|s| &s.aggregate),
                reputation_impact: field(|s| &s.impact),
                key,
                upstream: to.upstream,
                ses_tenant: to.tenant,
            }
        })
        .collect()
}

/// `POST /reputation/{key}/resume`: the tenant's window starts afresh.
async fn resume(State(live): State<Arc<Live>>, Path(key): Path<String>) -> Response {
    let Some(guard) = guard(&live) else {
        return off();
    };
    match guard.resume(&key).await {
        Ok(true) => Json(json!({"resumed": key})).into_response(),
        Ok(false) => not_found(&format!("no tenant {key:?} counted")),
        Err(e) => unavailable(&e),
    }
}

/// `GET /suppressions/{address}`: why and since when it is refused.
async fn suppression(State(live): State<Arc<Live>>, Path(address): Path<String>) -> Response {
    let Some(guard) = guard(&live) else {
        return off();
    };
    match guard.suppressed(&address).await {
        Some(s) => Json(json!({"address": address, "reason": s.reason_text(), "date": s.date}))
            .into_response(),
        None => not_found("not suppressed"),
    }
}

/// `DELETE /suppressions/{address}`: the address is taken again.
async fn unsuppress(State(live): State<Arc<Live>>, Path(address): Path<String>) -> Response {
    let Some(guard) = guard(&live) else {
        return off();
    };
    match guard.unsuppress(&address).await {
        Ok(true) => Json(json!({"unsuppressed": address})).into_response(),
        Ok(false) => not_found("not suppressed"),
        Err(e) => unavailable(&e),
    }
}

fn unavailable(e: &RedisUnavailable) -> Response {
    let body = json!({"error": format!("the reputation guard's Redis did not answer: {e}")});
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

fn not_found(why: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"error": why}))).into_response()
}
