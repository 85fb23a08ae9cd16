//! `POST /ses/events`: SES's events posted by SNS to an HTTPS subscription, for the topics of
//! `[reputation.sns] topics`. Admin authentication does not apply here (SNS cannot send it):
//! each message's signature does, checked by `reputation::sns_verifier` before anything is
//! read, and a subscription is confirmed only for a listed topic.
//!
//! | answer | when |
//! |---|---|
//! | 200 | a notification applied (or malformed inside, counted and dropped: it would never parse better), a subscription confirmed, an unsubscription logged |
//! | 400 | the body is not an SNS message |
//! | 403 | a topic not listed, or a message not signed by SNS (nothing applied, nothing fetched for an unlisted topic) |
//! | 404 | no `[reputation.sns]` |
//! | 413 | a body over [`MAX_POST_BYTES`] |
//! | 403 | also a notification whose `Timestamp` is over an hour old (a replay), or a certificate URL that is not one of SNS's (`/SimpleNotificationService-<hex>.pem`) |
//! | 502 | SNS could not be asked (its certificate or the confirmation): SNS tries again later |
//! | 503 | as many fetches from SNS in flight as allowed (`sns_verifier::MAX_FETCHES`), or the guard's store (Redis) does not answer: SNS tries again later |

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;

use crate::observe::metrics::Metrics;
use crate::reputation::events::MAX_EVENT_BYTES;
use crate::reputation::intake::take_in;
use crate::reputation::sns_signature::SnsMessage;
use crate::reputation::sns_verifier::{SnsVerifier, VerifyError};
use crate::state::context::Live;

/// Largest post read: an event of up to [`MAX_EVENT_BYTES`], escaped as a JSON string in the
/// envelope (its quotes doubled), with the envelope's own fields.
pub const MAX_POST_BYTES: usize = 2 * MAX_EVENT_BYTES;

pub struct SnsRoute {
    pub live: Arc<Live>,
    pub verifier: Arc<SnsVerifier>,
    pub metrics: Arc<Metrics>,
}

/// This route (the endpoint merges it).
pub fn routes<S>(route: SnsRoute) -> Router<S> {
    Router::new()
        .route("/ses/events", post(receive))
        .layer(DefaultBodyLimit::max(MAX_POST_BYTES))
        .with_state(Arc::new(route))
}

/// What one post came to; answered and logged once, by [`answer`].
enum Verdict {
    Off,
    Malformed(String),
    Refused(String),
    Unavailable(String),
    /// Fetches from SNS at their bound.
    Busy(String),
    /// The guard's shared store (Redis) did not answer: SNS sends it again later.
    StoreDown(String),
    Applied(&'static str),
    Confirmed,
    Unsubscribed,
}

async fn receive(State(route): State<Arc<SnsRoute>>, body: Bytes) -> Response {
    let (verdict, topic) = match serde_json::from_slice::<SnsMessage>(&body) {
        Ok(message) => {
            let verdict = judge(&route, &message).await;
            (verdict, message.topic_arn)
        }
        Err(e) => (Verdict::Malformed(e.to_string()), String::new()),
    };
    answer(verdict, &topic)
}

/// The topic listed, the signature checked, then the message acted on.
async fn judge(route: &SnsRoute, message: &SnsMessage) -> Verdict {
    let Some(ctx) = route.live.current() else {
        return Verdict::Unavailable("starting".into());
    };
    let sns = ctx
        .setup
        .config
        .reputation
        .as_ref()
        .and_then(|r| r.sns.as_ref());
    let (Some(guard), Some(sns)) = (ctx.services.reputation.clone(), sns) else {
        return Verdict::Off;
    };
    if !sns.topics.iter().any(|t| *t.get_ref() == message.topic_arn) {
        return Verdict::Refused("topic not listed in [reputation.sns] topics".into());
    }
    if let Err(e) = route.verifier.verify(message).await {
        return refusal(e);
    }
    match message.kind.as_str() {
        "Notification" => match take_in(&guard, &route.metrics, &message.message, "sns").await {
            Ok(kind) => Verdict::Applied(kind),
            Err(e) => Verdict::StoreDown(e.to_string()),
        },
        "SubscriptionConfirmation" => match route.verifier.confirm(message).await {
            Ok(()) => Verdict::Confirmed,
            Err(e) => refusal(e),
        },
        "UnsubscribeConfirmation" => Verdict::Unsubscribed,
        other => Verdict::Malformed(format!("Type {other:?}")),
    }
}

fn refusal(e: VerifyError) -> Verdict {
    match e {
        VerifyError::Refused(e) => Verdict::Refused(e.to_string()),
        e @ VerifyError::Fetch { .. } => Verdict::Unavailable(e.to_string()),
        e @ VerifyError::Busy => Verdict::Busy(e.to_string()),
    }
}

fn answer(verdict: Verdict, topic: &str) -> Response {
    let (status, body) = match verdict {
        Verdict::Off => (
            StatusCode::NOT_FOUND,
            json!({"error": "no [reputation.sns]: SNS posts are not taken"}),
        ),
        Verdict::Malformed(e) => {
            tracing::warn!(target: "mailsluice::reputation", error = e.as_str(), "reputation.sns: not an SNS message");
            (StatusCode::BAD_REQUEST, json!({"error": e}))
        }
        Verdict::Refused(e) => {
            tracing::warn!(target: "mailsluice::reputation", topic, error = e.as_str(), "reputation.sns refused");
            (StatusCode::FORBIDDEN, json!({"error": e}))
        }
        Verdict::Unavailable(e) => {
            tracing::warn!(target: "mailsluice::reputation", topic, error = e.as_str(), "reputation.sns: SNS unreachable");
            (StatusCode::BAD_GATEWAY, json!({"error": e}))
        }
        Verdict::Busy(e) => {
            tracing::warn!(target: "mailsluice::reputation", topic, error = e.as_str(), "reputation.sns: certificate fetches at their bound");
            (StatusCode::SERVICE_UNAVAILABLE, json!({"error": e}))
        }
        Verdict::StoreDown(e) => {
            tracing::warn!(target: "mailsluice::reputation", topic, error = e.as_str(), "reputation.sns: event not applied, the shared store does not answer");
            (StatusCode::SERVICE_UNAVAILABLE, json!({"error": e}))
        }
        Verdict::Applied(kind) => {
            tracing::debug!(target: "mailsluice::reputation", topic, kind, "reputation.sns event");
            (StatusCode::OK, json!({"applied": kind}))
        }
        Verdict::Confirmed => {
            tracing::info!(target: "mailsluice::reputation", topic, "reputation.sns subscription confirmed");
            (StatusCode::OK, json!({"confirmed": topic}))
        }
        Verdict::Unsubscribed => {
            tracing::warn!(target: "mailsluice::reputation", topic, "reputation.sns unsubscribed: SNS posts no more events of this topic");
            (StatusCode::OK, json!({"unsubscribed": topic}))
        }
    };
    (status, Json(body)).into_response()
}
