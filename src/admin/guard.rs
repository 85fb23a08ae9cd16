//! Who may use the admin endpoint. With `[admin] password_hash` set, every path but
//! `/healthz`, `/readyz` (load balancers) and `/ses/events` (SNS, which signs its posts) asks
//! for HTTP Basic authentication (any user name), checked against the argon2 hash as SMTP AUTH
//! checks its passwords (`inbound::login`) but in the endpoint's own check slots and lockout:
//! a wrong password is answered 401 after `failure_delay_ms`, and an address with
//! `max_failures` of them within `failure_window_ms` gets 429 with no check for `lockout_ms`
//! (after the same delay).
//! A request without credentials (a browser's first) is answered 401 at once and counts
//! nothing. Without a hash, reading stays open and anything that changes state answers 403: an
//! endpoint that can resume tenants or lift suppressions must not be open by default.

use std::sync::Arc;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::inbound::login::Login;
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
    let Some(password) = basic_password(&request) else {
        return unauthorized();
    };
    let delay = (ctx.setup.config.admin.as_ref()).map_or(0, |a| a.failure_delay_ms);
    let logins = &ctx.services.admin_logins;
    let ip = peer(&request);
    let check = async { logins.checks.matches(hash, password).await.then_some(()) };
    match logins
        .attempt(ip, Duration::from_millis(delay), check)
        .await
    {
        Login::Accepted(()) => next.run(request).await,
        Login::Refused => {
            tracing::info!(%ip, "admin: wrong password");
            unauthorized()
        }
        Login::LockedOut { now } => {
            match now {
                true => tracing::warn!(%ip, "admin: wrong passwords past max_failures, locked out"),
                false => tracing::debug!(%ip, "admin: refused, locked out"),
            }
            // Answered after the failure delay too: a client guessing in a loop is held to
            // one request a delay per connection, not as many as the endpoint can answer.
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let why = "too many wrong passwords from your address, try again later";
            (StatusCode::TOO_MANY_REQUESTS, why).into_response()
        }
    }
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Basic realm=\"mailsluice\"")],
        "authentication required",
    )
        .into_response()
}

/// The client's address, as the endpoint's accept loop records it (unspecified when the
/// router is served some other way: every such client then shares one lockout).
fn peer(request: &Request) -> IpAddr {
    (request.extensions().get::<ConnectInfo<SocketAddr>>())
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
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
