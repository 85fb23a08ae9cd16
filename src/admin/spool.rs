//! The spool's endpoints, which `mailsluice spool` calls: what it holds (`GET /spool`, its
//! messages `GET /spool/messages` or a key's `GET /spool/keys/{layer}/{key}/messages`,
//! `?failed` for the failed ones only; one `GET /spool/{id}`), and an operator's hand on it:
//! try a message now (`POST /spool/{id}/release`, still charged to its buckets and behind its
//! key's earlier messages), every key's waiting ones (`POST /spool/release`, as `postqueue
//! -f`), remove one (`DELETE /spool/{id}`) or a key's (`DELETE /spool/keys/{layer}/{key}`, as
//! `postsuper -d`), put failed ones back (`POST /spool/{id}/requeue`, `POST /spool/requeue`,
//! as `postsuper -r`), stop or let go a whole key (`POST /spool/keys/{layer}/{key}/hold`,
//! `.../release`, as `postsuper -h` and `-H`; a stop is kept across restarts).
//! 404 when the relay has no spool. Writes need `[admin] password_hash` (see `guard`).
//! With `spool.store = "s3"` the same on the shared bucket and queue, but trying now and
//! stopping a key, refused with 409 (`NotWithS3`); S3 or SQS failing is a 503.

use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::spool::{Entry, HeldKey, NotWithS3, OperatorError, RemovedOne, Spool, State as Held};
use crate::state::context::Live;

/// These routes, on the live context (the endpoint merges them).
pub fn routes<S>(live: Arc<Live>) -> Router<S> {
    Router::new()
        .route("/spool", get(summary))
        .route("/spool/messages", get(list_all))
        .route("/spool/release", post(release_all))
        .route("/spool/requeue", post(requeue_all))
        .route("/spool/{id}", get(message).delete(remove))
        .route("/spool/{id}/release", post(release))
        .route("/spool/{id}/requeue", post(requeue))
        .route("/spool/keys/{layer}/{key}", delete(remove_key))
        .route("/spool/keys/{layer}/{key}/messages", get(list_key))
        .route("/spool/keys/{layer}/{key}/hold", post(hold_key))
        .route("/spool/keys/{layer}/{key}/release", post(release_key))
        .with_state(live)
}

fn spool(live: &Live) -> Option<Arc<Spool>> {
    live.current().and_then(|c| c.services.spool.clone())
}

fn off() -> Response {
    answer(StatusCode::NOT_FOUND, "the relay has no spool (no [spool])")
}

fn answer(status: StatusCode, error: &str) -> Response {
    (status, Json(json!({ "error": error }))).into_response()
}

/// An operator's request not done: 409 for what the store cannot do, 503 when S3 or SQS
/// failed, 500 for a file of the directory that would not move (`doing` says what).
fn refused(error: &OperatorError, doing: &str) -> Response {
    let status = match error {
        OperatorError::NotWithS3(_) => StatusCode::CONFLICT,
        OperatorError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        OperatorError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let why = match error {
        OperatorError::NotWithS3(e) => e.to_string(),
        _ => format!("{doing}: {error}"),
    };
    answer(status, &why)
}

fn not_with_s3(refused: NotWithS3) -> Response {
    answer(StatusCode::CONFLICT, &refused.to_string())
}

/// `GET /spool`: messages, bytes, the oldest's age, and each key's (with S3: the keys of
/// the entries this replica has received).
async fn summary(State(live): State<Arc<Live>>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    if let Err(e) = spool.refresh().await {
        return refused(&e, "listing the spool");
    }
    let s = spool.summary();
    let now = spool.wall_ms();
    let keys: Vec<_> = (spool.keys().into_iter())
        .map(|k| {
            json!({
                "layer": k.key.layer,
                "key": k.key.key,
                "messages": k.messages,
                "bytes": k.bytes,
                "oldest_ms": now.saturating_sub(k.oldest_ms),
                "stopped": spool.is_stopped(&k.key),
            })
        })
        .collect();
    let body = json!({
        "messages": s.messages,
        "bytes": s.bytes,
        "oldest_ms": s.oldest_ms,
        "failed": s.failed,
        "keys": keys,
    });
    Json(body).into_response()
}

/// `GET /spool/{id}`: its envelope, key, state, attempts and last answer.
async fn message(State(live): State<Arc<Live>>, Path(id): Path<String>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    let (key, entry, meta) = match spool.message(&id).await {
        Ok(Some(found)) => found,
        Ok(None) => return answer(StatusCode::NOT_FOUND, "no such message in the spool"),
        Err(e) => return refused(&e, "reading it"),
    };
    let mut body = entry_json(&key, &entry, spool.wall_ms());
    body["stopped"] = spool.is_stopped(&key).into();
    body["from"] = meta.from.unwrap_or_default().into();
    body["rcpts"] = meta.rcpts.into();
    body["report"] = meta.report.into();
    Json(body).into_response()
}

/// `POST /spool/{id}/release`: try it now (it still waits for its tokens); a failed message
/// is put back in its key's queue first.
async fn release(State(live): State<Arc<Live>>, Path(id): Path<String>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    // Refused before the lookup: with S3 this replica's index has only what it received.
    if spool.shared() {
        return not_with_s3(NotWithS3::Release);
    }
    let Some((_, entry)) = spool.get(&id) else {
        return answer(StatusCode::NOT_FOUND, "no such message in the spool");
    };
    if entry.state == Held::Failed {
        return match spool.requeue(&id).await {
            Ok(true) => Json(json!({ "released": id, "requeued": true })).into_response(),
            Ok(false) => answer(StatusCode::CONFLICT, "it is being put back already"),
            Err(e) => refused(&e, "moving it back to held/"),
        };
    }
    match spool.release_now(&id) {
        Ok(true) => return Json(json!({ "released": id })).into_response(),
        Ok(false) => {}
        Err(refused) => return not_with_s3(refused),
    }
    let why = match entry.state {
        Held::Releasing => "it is being released now",
        Held::Writing => "it is being written",
        Held::Held | Held::Failed => {
            "it waits behind earlier messages of its key (first in, first out)"
        }
    };
    answer(StatusCode::CONFLICT, why)
}

/// `DELETE /spool/{id}`: removes it (not while it is with upstream).
async fn remove(State(live): State<Arc<Live>>, Path(id): Path<String>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    match spool.remove_one(&id).await {
        Ok(RemovedOne::NotFound) => answer(StatusCode::NOT_FOUND, "no such message in the spool"),
        Ok(RemovedOne::Busy) => answer(StatusCode::CONFLICT, "it is being written or released now"),
        Ok(RemovedOne::Removed) => {
            tracing::warn!(target: "mailsluice::spool", id, "spool.removed by an operator");
            Json(json!({ "removed": id })).into_response()
        }
        Err(e) => refused(&e, "removing it"),
    }
}

async fn hold_key(State(live): State<Arc<Live>>, Path(key): Path<(String, String)>) -> Response {
    stop(&live, key, true).await
}

async fn release_key(State(live): State<Arc<Live>>, Path(key): Path<(String, String)>) -> Response {
    stop(&live, key, false).await
}

/// Stops releasing a key's messages, or lets them go again (its first tried now); kept in
/// the spool's directory across restarts.
async fn stop(live: &Live, (layer, key): (String, String), stopped: bool) -> Response {
    let Some(spool) = spool(live) else {
        return off();
    };
    let key = HeldKey { layer, key };
    let kept = match spool.stop_key(&key, stopped).await {
        Err(OperatorError::NotWithS3(refused)) => return not_with_s3(refused),
        kept => kept,
    };
    tracing::info!(
        target: "mailsluice::spool",
        layer = key.layer.as_str(),
        key = key.key.as_str(),
        stopped,
        kept = kept.is_ok(),
        "spool.key_stopped by an operator"
    );
    if let Err(e) = kept {
        let why = format!("done until the relay stops, but not kept across a restart: {e}");
        return answer(StatusCode::INTERNAL_SERVER_ERROR, &why);
    }
    Json(json!({ "layer": key.layer, "key": key.key, "stopped": stopped })).into_response()
}

/// `GET /spool/messages[?failed]`: every message (see `listed`).
async fn list_all(State(live): State<Arc<Live>>, RawQuery(query): RawQuery) -> Response {
    listed(&live, None, query).await
}

/// `GET /spool/keys/{layer}/{key}/messages[?failed]`: the key's messages.
async fn list_key(
    State(live): State<Arc<Live>>,
    Path((layer, key)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Response {
    listed(&live, Some(HeldKey { layer, key }), query).await
}

/// The messages of `key` (or all): held ones by key in their order, then failed ones; only
/// the failed with `?failed`. At most `MAX_LISTED` of them, with the total and `truncated`.
async fn listed(live: &Live, key: Option<HeldKey>, query: Option<String>) -> Response {
    let Some(spool) = spool(live) else {
        return off();
    };
    let failed_only = match query.as_deref() {
        None | Some("") => false,
        Some("failed" | "failed=true") => true,
        Some(_) => return answer(StatusCode::BAD_REQUEST, "the only query is ?failed"),
    };
    let listed = match spool.list(key.as_ref(), failed_only).await {
        Ok(listed) => listed,
        Err(e) => return refused(&e, "listing the spool"),
    };
    let now = spool.wall_ms();
    let messages: Vec<_> = (listed.messages.iter())
        .map(|(key, entry)| {
            let mut one = entry_json(key, entry, now);
            one["stopped"] = spool.is_stopped(key).into();
            one
        })
        .collect();
    let body = json!({
        "messages": messages,
        "total": listed.total,
        "truncated": listed.truncated,
    });
    Json(body).into_response()
}

/// What the index knows of one message, as `GET /spool/{id}` and the lists show it.
fn entry_json(key: &HeldKey, entry: &Entry, now_ms: u64) -> serde_json::Value {
    json!({
        "id": &*entry.id,
        "layer": key.layer,
        "key": key.key,
        "state": entry.state.as_str(),
        "attempts": entry.attempts,
        "last_answer": entry.last.as_deref(),
        "held_ms": now_ms.saturating_sub(entry.accepted_ms),
        "bytes": entry.bytes,
    })
}

/// `POST /spool/release`: every message waiting out a backoff tried now (stopped keys
/// apart), as `postqueue -f`.
async fn release_all(State(live): State<Arc<Live>>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    let released = match spool.release_waiting(None) {
        Ok(released) => released,
        Err(refused) => return not_with_s3(refused),
    };
    tracing::info!(target: "mailsluice::spool", released, "spool.released by an operator");
    Json(json!({ "released": released })).into_response()
}

/// `DELETE /spool/keys/{layer}/{key}`: removes the key's messages, held and failed (not
/// those with upstream now), as `postsuper -d`.
async fn remove_key(
    State(live): State<Arc<Live>>,
    Path((layer, key)): Path<(String, String)>,
) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    let key = HeldKey { layer, key };
    let done = match spool.remove_key(&key).await {
        Ok(done) => done,
        Err(e) => return refused(&e, "removing the key's messages"),
    };
    tracing::warn!(
        target: "mailsluice::spool",
        layer = key.layer.as_str(),
        key = key.key.as_str(),
        removed = done.removed,
        busy = done.busy,
        "spool.removed by an operator"
    );
    let body = json!({
        "layer": key.layer,
        "key": key.key,
        "removed": done.removed,
        "busy": done.busy,
    });
    Json(body).into_response()
}

/// `POST /spool/{id}/requeue`: a failed message put back in its key's queue, as
/// `postsuper -r`; 409 for a message that is not failed.
async fn requeue(State(live): State<Arc<Live>>, Path(id): Path<String>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    let entry = match spool.message(&id).await {
        Ok(Some((_, entry, _))) => entry,
        Ok(None) => return answer(StatusCode::NOT_FOUND, "no such message in the spool"),
        Err(e) => return refused(&e, "reading it"),
    };
    if entry.state != Held::Failed {
        let why = "it is not a failed message: it is held, release it instead";
        return answer(StatusCode::CONFLICT, why);
    }
    match spool.requeue(&id).await {
        Ok(true) => Json(json!({ "requeued": 1 })).into_response(),
        Ok(false) => answer(StatusCode::CONFLICT, "it is being put back already"),
        Err(e) => refused(&e, "moving it back to held/"),
    }
}

/// `POST /spool/requeue`: every failed message put back, as `postsuper -r ALL`.
async fn requeue_all(State(live): State<Arc<Live>>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    match spool.requeue_failed().await {
        Ok(requeued) => {
            tracing::info!(target: "mailsluice::spool", requeued, "spool.requeued by an operator");
            Json(json!({ "requeued": requeued })).into_response()
        }
        Err(e) => refused(&e, "moving a failed message back to held/"),
    }
}
