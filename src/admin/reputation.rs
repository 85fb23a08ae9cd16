//! The reputation guard's endpoints: each tenant's standing, an operator's resume, and the
//! suppression of one address (read, lifted). 404 when `[reputation]` is not set.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::endpoint::Admin;
use crate::reputation::Reputation;

fn guard(admin: &Admin) -> Result<Arc<Reputation>, Response> {
    let ctx = admin.live.current();
    (ctx.and_then(|c| c.reputation.clone())).ok_or_else(|| {
        let body = json!({"error": "the reputation guard is off (no [reputation])"});
        (StatusCode::NOT_FOUND, Json(body)).into_response()
    })
}

/// `GET /reputation`: every tenant counted in the window, and the guard's totals.
pub async fn standings(State(admin): State<Arc<Admin>>) -> Response {
    let guard = match guard(&admin) {
        Ok(g) => g,
        Err(response) => return response,
    };
    let body = json!({
        "tenants": guard.standings(),
        "paused": guard.paused(),
        "suppressed": guard.suppressed_count(),
        "unattributed": guard.unattributed(),
        "tracked_messages": guard.tracked(),
    });
    Json(body).into_response()
}

/// `POST /reputation/{key}/resume`: the tenant's window starts afresh.
pub async fn resume(State(admin): State<Arc<Admin>>, Path(key): Path<String>) -> Response {
    let guard = match guard(&admin) {
        Ok(g) => g,
        Err(response) => return response,
    };
    match guard.resume(&key) {
        true => Json(json!({"resumed": key})).into_response(),
        false => not_found(&format!("no tenant {key:?} counted")),
    }
}

/// `GET /suppressions/{address}`: why and since when it is refused.
pub async fn suppression(State(admin): State<Arc<Admin>>, Path(address): Path<String>) -> Response {
    let guard = match guard(&admin) {
        Ok(g) => g,
        Err(response) => return response,
    };
    match guard.suppressed(&address) {
        Some(s) => Json(json!({"address": address, "reason": s.reason_text(), "date": s.date}))
            .into_response(),
        None => not_found("not suppressed"),
    }
}

/// `DELETE /suppressions/{address}`: the address is taken again.
pub async fn unsuppress(State(admin): State<Arc<Admin>>, Path(address): Path<String>) -> Response {
    let guard = match guard(&admin) {
        Ok(g) => g,
        Err(response) => return response,
    };
    match guard.unsuppress(&address) {
        true => Json(json!({"unsuppressed": address})).into_response(),
        false => not_found("not suppressed"),
    }
}

fn not_found(why: &str) -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"error": why}))).into_response()
}
