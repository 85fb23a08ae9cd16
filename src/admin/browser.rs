//! Changes only from a page of the endpoint's own, or from no page at all. A browser that
//! has the admin password cached sends it with any page's form post to the endpoint, so a
//! request that changes state (every method but GET, HEAD and OPTIONS) is refused 403 when
//! the browser says another site sent it (`Sec-Fetch-Site: cross-site` or `same-site`, or an
//! `Origin` other than `http://<Host>` or `https://<Host>`), and 415 with a form's content
//! type (the endpoints take no form body, and a form is what another site can post without
//! asking). curl, the CLI and scripts send neither header and are served.
//! `/ses/events` is exempt: SNS posts `text/plain`, and what it posts is checked by signature.

use axum::extract::Request;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Paths not checked: SNS's signed posts.
const EXEMPT: [&str; 1] = ["/ses/events"];

/// The content types an HTML form (or another site's `fetch` without a preflight) can send.
const FORM_TYPES: [&str; 3] = [
    "application/x-www-form-urlencoded",
    "multipart/form-data",
    "text/plain",
];

pub async fn check(request: Request, next: Next) -> Response {
    let safe = [Method::GET, Method::HEAD, Method::OPTIONS].contains(request.method());
    if safe || EXEMPT.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let headers = request.headers();
    if from_another_site(headers) {
        tracing::info!(path = %request.uri().path(), "admin: change from another site refused");
        let why = "changes are taken from this endpoint's own pages or from no page at all";
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    if is_form(headers) {
        let why = "this endpoint takes no form body";
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, why).into_response();
    }
    next.run(request).await
}

/// Whether the browser says another site sent the request.
fn from_another_site(headers: &HeaderMap) -> bool {
    let text = |name| {
        (headers.get(name)).map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        })
    };
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if site == "cross-site" || site == "same-site" {
            return true;
        }
    }
    let Some(origin) = text(header::ORIGIN) else {
        return false;
    };
    let Some(host) = text(header::HOST) else {
        return true;
    };
    origin != format!("http://{host}") && origin != format!("https://{host}")
}

/// Whether the body's content type is one a form can send.
fn is_form(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let value = String::from_utf8_lossy(value.as_bytes());
    let media = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    FORM_TYPES.contains(&media.as_str())
}
