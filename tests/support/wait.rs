//! Waiting in real time for something a test cannot be told about.

use std::time::Duration;

/// Waits (real time, at most 30 s, looking every 10 ms) until `cond` holds; panics naming
/// `what` otherwise.
pub async fn until(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    for _ in 0..3000 {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}
