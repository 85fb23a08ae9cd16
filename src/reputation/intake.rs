//! One event record from a source (the SQS queue, an SNS post): applied to the guard, its kind
//! counted (`mailsluice_reputation_events_total{kind}`), a malformed one logged and dropped.
//! Both sources take events the same way; only what they do with a record the guard could not
//! apply differs (SQS leaves it in the queue, SNS is answered 503).

use super::{Applied, EventError, Reputation};
use crate::observe::metrics::Metrics;

/// The kind counted (`bounce`, `complaint`, `ignored`, `malformed`), or the error when the
/// guard's shared store did not answer: nothing applied, nothing counted, to be sent again.
pub async fn take_in(
    guard: &Reputation,
    metrics: &Metrics,
    text: &str,
    source: &'static str,
) -> Result<&'static str, EventError> {
    let kind = match guard.apply_text(text).await {
        Ok(Applied::Counted { kind, .. }) => kind.as_str(),
        Ok(Applied::Repeat(_)) | Ok(Applied::Ignored) => "ignored",
        Err(e) if !e.is_malformed() => return Err(e),
        Err(e) => {
            tracing::warn!(
                target: "mailsluice::reputation",
                error = %e,
                bytes = text.len(),
                source,
                "reputation.malformed event dropped"
            );
            "malformed"
        }
    };
    metrics.reputation_event(kind);
    Ok(kind)
}
