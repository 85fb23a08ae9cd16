//! The spool's endpoints: what it holds (`GET /spool`, `GET /spool/{id}`), and an operator's
//! hand on it: try a message now (`POST /spool/{id}/release`, still charged to its buckets and
//! behind its key's earlier messages), remove one (`DELETE /spool/{id}`), stop or let go a
//! whole key (`POST /spool/keys/{layer}/{key}/hold`, `.../release`, as `postsuper -h` does).
//! 404 when the relay has no spool. Writes need `[admin] password_hash` (see `guard`).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::spool::{HeldKey, Spool, State as Held};
use crate::state::context::Live;

/// These routes, on the live context (the endpoint merges them).
pub fn routes<S>(live: Arc<Live>) -> Router<S> {
    Router::new()
        .route("/spool", get(summary))
        .route("/spool/{id}", get(message).delete(remove))
        .route("/spool/{id}/release", post(release))
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

/// `GET /spool`: messages, bytes, the oldest's age, and each key's.
async fn summary(State(live): State<Arc<Live>>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
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
    let (Some((key, entry)), Some(meta)) = (spool.get(&id), spool.meta(&id).await) else {
        return answer(StatusCode::NOT_FOUND, "no such message in the spool");
    };
    let body = json!({
        "id": id,
        "layer": key.layer,
        "key": key.key,
        "state": entry.state.as_str(),
        "attempts": entry.attempts,
        "last_answer": entry.last.as_deref(),
        "held_ms": spool.wall_ms().saturating_sub(entry.accepted_ms),
        "bytes": entry.bytes,
        "from": meta.from.unwrap_or_default(),
        "rcpts": meta.rcpts,
        "report": meta.report,
    });
    Json(body).into_response()
}

/// `POST /spool/{id}/release`: try it now (it still waits for its tokens); a failed message
/// is put back in its key's queue first.
async fn release(State(live): State<Arc<Live>>, Path(id): Path<String>) -> Response {
    let Some(spool) = spool(&live) else {
        return off();
    };
    let Some((_, entry)) = spool.get(&id) else {
        return answer(StatusCode::NOT_FOUND, "no such message in the spool");
    };
    if entry.state == Held::Failed {
        return match spool.requeue(&id).await {
            Ok(true) => Json(json!({ "released": id, "requeued": true })).into_response(),
            Ok(false) => answer(StatusCode::CONFLICT, "it is being put back already"),
            Err(e) => {
                let why = format!("moving it back to held/: {e}");
                answer(StatusCode::INTERNAL_SERVER_ERROR, &why)
            }
        };
    }
    if spool.release_now(&id) {
        return Json(json!({ "released": id })).into_response();
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
    match spool.get(&id).map(|(_, e)| e.state) {
        None => answer(StatusCode::NOT_FOUND, "no such message in the spool"),
        Some(Held::Releasing | Held::Writing) => {
            answer(StatusCode::CONFLICT, "it is being written or released now")
        }
        Some(_) => {
            spool.remove(&id).await;
            tracing::warn!(target: "mailsluice::spool", id, "spool.removed by an operator");
            Json(json!({ "removed": id })).into_response()
        }
    }
}

async fn hold_key(State(live): State<Arc<Live>>, Path(key): Path<(String, String)>) -> Response {
    stop(&live, key, true)
}

async fn release_key(State(live): State<Arc<Live>>, Path(key): Path<(String, String)>) -> Response {
    stop(&live, key, false)
}

/// Stops releasing a key's messages, or lets them go again.
fn stop(live: &Live, (layer, key): (String, String), stopped: bool) -> Response {
    let Some(spool) = spool(live) else {
        return off();
    };
    let key = HeldKey { layer, key };
    spool.stop_key(&key, stopped);
    tracing::info!(
        target: "mailsluice::spool",
        layer = key.layer.as_str(),
        key = key.key.as_str(),
        stopped,
        "spool.key_stopped by an operator"
    );
    Json(json!({ "layer": key.layer, "key": key.key, "stopped": stopped })).into_response()
}
