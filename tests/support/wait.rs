//! Waiting in real time for something a test cannot be told about.

use std::time::Duration;

/// Waits (real time, at most 30 s, looking every 10 ms) until `cond` holds; panics naming
/// `what` otherwise.
pub async fn until(what: &str, cond: impl AsyncFnMut() -> bool) {
    if !within(Duration::from_secs(30), cond).await {
        panic!("never happened: {what}");
    }
}

/// Waits (real time, looking every 10 ms) until `cond` holds, at most `limit`; whether it
/// held, so that the test can say what it saw instead.
pub async fn within(limit: Duration, mut cond: impl AsyncFnMut() -> bool) -> bool {
    for _ in 0..limit.as_millis().div_ceil(10) {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}
