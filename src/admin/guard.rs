//! Who may use the admin endpoint. With `[admin] password_hash` set, every path but
//! `/healthz`, `/readyz` (load balancers) and `/ses/events` (SNS, which signs its posts) asks
//! for HTTP Basic authentication, checked against the argon2 hash by the process's bounded
//! password checker (the one AUTH uses; any user name). Without a hash, reading stays open and
//! anything that changes state answers 403: an endpoint that can resume tenants or lift
//! suppressions must not be open by default.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::state::context::Live;

/// Paths open to all: probes, and SNS's signed posts.
const OPEN: [&str; 3] = ["/healthz", "/readyz", "/ses/events"];

pub async fn authenticate(State(live): State<Arc<Live>>, request: Request, next: Next) -> Response {
    if OPEN.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let Some(ctx) = live.current() else {
        return next.run(request).await;
    };
    let hash = (ctx.setup.config.admin.as_ref())
        .and_then(|a| a.password_hash.as_ref())
        .map(|h| h.get_ref().clone());
    let Some(hash) = hash else {
        if request.method() == Method::GET || request.method() == Method::HEAD {
            return next.run(request).await;
        }
        let why = "this endpoint changes state: set [admin] password_hash to use it";
        return (StatusCode::FORBIDDEN, why).into_response();
    };
    let password = basic_password(&request);
    let ok = match password {
        Some(password) => ctx.services.password_checks.matches(hash, password).await,
        None => false,
    };
    if ok {
        return next.run(request).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"mailsluice\"")],
        "authentication required",
    )
        .into_response()
}

/// The password of an `Authorization: Basic` header.
fn basic_password(request: &Request) -> Option<String> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    text.split_once(':')
        .map(|(_, password)| password.to_string())
}
