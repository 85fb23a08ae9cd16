//! Unit tests of the throttle as a whole: buckets forgotten when full and idle, and shutdown
//! of a message asleep on a shared store's reservation. Fake or paused clocks, never a sleep.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::config::Refill;
use crate::throttle::clock::FakeClock;

const SEC: Duration = Duration::from_secs(1);

fn charge(key: &str) -> Vec<Charge> {
    vec![Charge {
        layer: 0,
        key: key.to_string(),
        cost: 1,
    }]
}

/// One token a second (burst 1) or one a window of `interval`; idle buckets forgotten after
/// a minute; room for many more keys than any test uses (no `max_keys` pressure).
fn layer(refill: Refill, interval: Duration) -> LayerSpec {
    LayerSpec {
        refill,
        idle_ttl: 60 * SEC,
        ..LayerSpec::new("t", 1, interval)
    }
}

async fn spend(t: &Throttle, key: &str) {
    t.acquire(charge(key)).await.expect("granted").delivered();
}

/// Messages of other keys: activity in the layer's table.
async fn activity(t: &Throttle) {
    for i in 0..8 {
        spend(t, &format!("other-{i}")).await;
    }
}

#[tokio::test]
async fn a_full_bucket_idle_past_idle_ttl_is_forgotten_without_max_keys_pressure() {
    for refill in [Refill::Drip, Refill::FixedWindow] {
        let clock = Arc::new(FakeClock::new(0));
        let t = Throttle::new(vec![layer(refill, SEC)], clock.clone());
        spend(&t, "idle").await;
        assert!(t.holds(0, "idle"));
        // Full again after a second, then unused for a minute more.
        clock.advance(61 * SEC);
        activity(&t).await;
        assert!(!t.holds(0, "idle"), "{refill:?}: full and idle, forgotten");
        assert_eq!(t.keys(0), 8, "{refill:?}: the other keys are fresh");
        assert_eq!(
            t.evictions(0),
            0,
            "{refill:?}: forgetting a full bucket loses nothing"
        );
        assert_eq!(t.peek("t", "idle").unwrap().remaining, 1);
    }
}

#[tokio::test]
async fn a_bucket_not_full_yet_or_not_idle_long_enough_is_kept() {
    // Not full: a window of a day, a drip of one token an hour.
    for (refill, interval) in [
        (Refill::FixedWindow, 86_400 * SEC),
        (Refill::Drip, 3_600 * SEC),
    ] {
        let clock = Arc::new(FakeClock::new(0));
        let t = Throttle::new(vec![layer(refill, interval)], clock.clone());
        spend(&t, "busy").await;
        clock.advance(61 * SEC);
        activity(&t).await;
        assert!(t.holds(0, "busy"), "{refill:?}: not full, kept");
        assert_eq!(t.peek("t", "busy").unwrap().remaining, 0);
    }
    // Full, but used 30 s ago only.
    let clock = Arc::new(FakeClock::new(0));
    let t = Throttle::new(vec![layer(Refill::Drip, SEC)], clock.clone());
    spend(&t, "recent").await;
    clock.advance(30 * SEC);
    activity(&t).await;
    assert!(t.holds(0, "recent"));
}

#[tokio::test(start_paused = true)]
async fn a_bucket_with_waiters_is_never_forgotten() {
    let clock = Arc::new(FakeClock::new(0));
    let t = Arc::new(Throttle::new(vec![layer(Refill::Drip, SEC)], clock.clone()));
    spend(&t, "busy").await;
    let waiter = tokio::spawn({
        let t = t.clone();
        async move { t.acquire(charge("busy")).await.map(Permit::delivered) }
    });
    while t.waiting(0) == 0 {
        tokio::task::yield_now().await;
    }
    // The fake clock moves, tokio's does not: the waiter's timer has not fired, so its bucket
    // is full and idle, but it has a waiter.
    clock.advance(86_400 * SEC);
    activity(&t).await;
    assert!(t.holds(0, "busy"));
    t.dispose();
    assert_eq!(waiter.await.unwrap(), Err(ThrottleError::Shutdown));
}
