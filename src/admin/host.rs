//! Which `Host` the endpoint answers: its own listen address, or a name in `[admin] hosts`.
//! A page whose name an attacker rebinds to the endpoint's address (DNS rebinding) is same
//! origin to the browser and could read every answer; its requests carry the attacker's name
//! in `Host`, so they get `421 Misdirected Request`: this server does not answer for that
//! name (no credentials would change it, as a 403 would suggest).
//!
//! An IP literal is the listener's own when it is the listener's address: any loopback
//! address (or `localhost`) for a loopback listener, any address at all for one on `0.0.0.0`
//! or `::` (a probe by pod IP). Its port is not compared: a published container port,
//! `kubectl port-forward` or a Service may show the client another, and only a name can be
//! rebound, never a literal. `/ses/events` is exempt: SNS posts with the name of the proxy in
//! front, and what it posts is checked by signature.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::AdminConfig;
use crate::state::context::Live;

/// The address the endpoint's listener is bound to, as its accept loop records it on every
/// request (the config's `listen` when the router is served some other way).
#[derive(Debug, Clone, Copy)]
pub struct Listening(pub SocketAddr);

/// Paths whose `Host` is not checked: SNS's signed posts.
const ANY_HOST: [&str; 1] = ["/ses/events"];

pub async fn check(State(live): State<Arc<Live>>, request: Request, next: Next) -> Response {
    if ANY_HOST.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let Some(ctx) = live.current() else {
        return next.run(request).await;
    };
    let admin = ctx.setup.config.admin.as_ref();
    let listening = match request.extensions().get::<Listening>() {
        Some(listening) => listening.0,
        None => admin.map_or_else(|| AdminConfig::default().listen, |a| a.listen),
    };
    let Some(host) = host_of(&request) else {
        // Browsers always send one: a request without it is a script's.
        return next.run(request).await;
    };
    let named = |name: &str| admin.is_some_and(|a| a.hosts.iter().any(|h| h.as_str() == name));
    if is_own(&host, listening.ip(), named) {
        return next.run(request).await;
    }
    // Debug: a page in a loop must not flood the log.
    tracing::debug!(host = %host, "admin: request for another host refused");
    let why = "this endpoint does not answer for that Host: see [admin] hosts";
    (StatusCode::MISDIRECTED_REQUEST, why).into_response()
}

/// The authority the request was sent to: its `Host` header (or an absolute URI's).
fn host_of(request: &Request) -> Option<String> {
    match request.headers().get(header::HOST) {
        Some(value) => Some(String::from_utf8_lossy(value.as_bytes()).into_owned()),
        None => request.uri().authority().map(|a| a.to_string()),
    }
}

/// Whether `host` (a `Host` value: name or IP literal, with or without its port) names the
/// endpoint listening on `listening`, or is a name `named` accepts.
pub fn is_own(host: &str, listening: IpAddr, named: impl Fn(&str) -> bool) -> bool {
    let Some(name) = name_of(host) else {
        return false;
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if named(&name) {
        return true;
    }
    let local = listening.is_loopback() || listening.is_unspecified();
    match name.parse::<IpAddr>() {
        Ok(literal) => {
            literal == listening
                || listening.is_unspecified()
                || (listening.is_loopback() && literal.is_loopback())
        }
        Err(_) => name == "localhost" && local,
    }
}

/// The name of `name:port`, `[v6]:port`, or either without a port (an IPv6 literal without
/// its brackets); `None` when it is neither.
fn name_of(host: &str) -> Option<&str> {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']')?,
        None => match host.split_once(':') {
            Some((name, _)) => (name, &host[name.len()..]),
            None => (host, ""),
        },
    };
    if !port.is_empty() {
        port.strip_prefix(':')?.parse::<u16>().ok()?;
    }
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(host: &str, listening: &str) -> bool {
        is_own(host, listening.parse().unwrap(), |n| n == "relay.internal")
    }

    #[test]
    fn a_loopback_listener_answers_its_loopback_names() {
        for host in [
            "127.0.0.1:9325",
            "localhost:9325",
            "[::1]:9325",
            "LOCALHOST",
            "127.0.0.1:19325",
        ] {
            assert!(own(host, "127.0.0.1"), "{host}");
        }
        for host in [
            "evil.test:9325",
            "evil.test",
            "10.0.0.5:9325",
            "localhost:x",
            "[::1]9325",
        ] {
            assert!(!own(host, "127.0.0.1"), "{host}");
        }
    }

    #[test]
    fn a_wildcard_listener_answers_any_ip_literal_and_names_only_configured() {
        for host in [
            "10.1.2.3:9325",
            "[fd00::7]:9325",
            "10.1.2.3",
            "localhost:9325",
            "relay.internal",
            "Relay.Internal.:80",
        ] {
            assert!(own(host, "0.0.0.0"), "{host}");
        }
        for host in [
            "mailsluice:9325",
            "evil.test:9325",
            "[fd00::7",
            "a:b:9325",
            "",
            ":9325",
        ] {
            assert!(!own(host, "0.0.0.0"), "{host}");
        }
    }

    #[test]
    fn a_listener_on_one_address_answers_that_address() {
        assert!(own("10.1.2.3:9325", "10.1.2.3"));
        assert!(!own("10.1.2.4:9325", "10.1.2.3"));
        assert!(!own("localhost:9325", "10.1.2.3"));
    }
}
