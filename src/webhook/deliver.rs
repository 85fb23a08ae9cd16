//! A webhook's delivery task: batches taken off its queue, each POSTed signed, a 5xx, a
//! timeout or a broken connection sent again after a pause (1 s, doubling, at most 60 s) for
//! `retry_window_ms` after the first failure (and at most `max_attempts` POSTs, when set), a
//! 4xx not. While it retries, new events wait in the queue behind it, in order (its bounds
//! hold; the oldest go first). It runs beside the mail, never in its way.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use super::event::{Batch, Event};
use super::post::PostError;
use super::sign::signature;
use super::Hook;
use crate::clock::{nanos, Clock};

/// The first pause before a batch is sent again.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest pause.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What the status page shows of the last failure.
#[derive(Default)]
pub struct LastError(Mutex<Option<String>>);

impl LastError {
    fn set(&self, error: Option<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = error;
    }

    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Delivers `hook`'s events until the task is aborted.
pub async fn run(hook: Arc<Hook>, clock: Arc<dyn Clock>) {
    let max = hook.config.max_batch.get();
    loop {
        let batch = hook.queue.take(max).await;
        deliver(&hook, clock.as_ref(), &batch).await;
    }
}

/// One batch: sent, or given up and counted.
async fn deliver(hook: &Hook, clock: &dyn Clock, batch: &[Event]) {
    let body = Bytes::from(serde_json::to_vec(&Batch { events: batch }).unwrap_or_default());
    let n = batch.len() as u64;
    let window = nanos(Duration::from_millis(hook.config.retry_window_ms.get()));
    let attempts = hook.config.max_attempts.map_or(u64::MAX, |a| a.get());
    let mut first_failure = None;
    let mut pause = FIRST_BACKOFF;
    for attempt in 1..=attempts {
        let signed = signature(
            hook.config.secret.0.as_bytes(),
            clock.unix_now_secs(),
            &body,
        );
        let error = match hook.poster.post(body.clone(), &signed).await {
            Ok(_) => {
                hook.counters.sent.inc_by(n);
                hook.last_error.set(None);
                return;
            }
            Err(error) => error,
        };
        let failed_at = *first_failure.get_or_insert(clock.now());
        let waited = clock.now().saturating_sub(failed_at);
        let past_window = waited.saturating_add(nanos(pause)) > window;
        let last = attempt == attempts || !error.retried() || past_window;
        log(hook, &error, attempt, n, last);
        hook.last_error.set(Some(error.to_string()));
        if last {
            hook.counters.failed.inc_by(n);
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_BACKOFF);
    }
}

fn log(hook: &Hook, error: &PostError, attempt: u64, events: u64, given_up: bool) {
    tracing::warn!(
        target: "mailsluice::webhook",
        webhook = hook.config.name.as_str(),
        error = %error,
        attempt,
        events,
        given_up,
        "webhook.failed"
    );
}
