//! Unit tests of the throttle as a whole: buckets forgotten when full and idle, and shutdown
//! of a message asleep on a shared store's reservation. Fake or paused clocks, never a sleep.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::*;
use crate::clock::{FakeClock, TokioClock};
use crate::config::Refill;
use crate::throttle::store::Decision;

mod scripted;
use scripted::Scripted;

const SEC: Duration = Duration::from_secs(1);

fn charge(key: &str) -> Vec<Charge> {
    vec![Charge {
        layer: 0,
        key: key.to_string(),
        cost: 1,
        fair: String::new(),
        blame: String::new(),
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

const HOUR: Nanos = 3_600_000_000_000;
const SEC_NANOS: Nanos = 1_000_000_000;

/// A throttle whose one layer is on `store`; a message is sent in a task and left once the
/// store has answered it. Paused tokio time: nothing moves unless every task is idle.
async fn asleep_on(store: Arc<Scripted>) -> (Arc<Throttle>, JoinHandle<Result<(), ThrottleError>>) {
    let shared = SharedLayers {
        store: store.clone(),
        layers: vec![0],
        on_error: crate::config::OnError::Reject,
    };
    let spec = LayerSpec {
        max_wait: Duration::from_secs(7_200),
        ..LayerSpec::new("t", 1, SEC)
    };
    let clock = Arc::new(TokioClock::new());
    let t = Arc::new(Throttle::with_shared(vec![spec], clock, shared));
    let message = tokio::spawn({
        let t = t.clone();
        async move { t.acquire(charge("acme")).await.map(Permit::delivered) }
    });
    while store.takes() == 0 {
        tokio::task::yield_now().await;
    }
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    assert!(!message.is_finished(), "asleep, or asking the store");
    (t, message)
}

#[tokio::test(start_paused = true)]
async fn dispose_wakes_a_message_asleep_on_a_reservation_and_gives_it_back() {
    let store = Scripted::new(vec![Decision::Reserved { wait: HOUR }]);
    let (t, message) = asleep_on(store.clone()).await;
    let start = tokio::time::Instant::now();
    t.dispose();
    assert_eq!(message.await.unwrap(), Err(ThrottleError::Shutdown));
    assert_eq!(
        tokio::time::Instant::now(),
        start,
        "at once, not at its instant"
    );
    assert_eq!(store.given_back(), [(0, "acme".to_string(), 1)]);
}

#[tokio::test(start_paused = true)]
async fn dispose_wakes_a_message_told_to_ask_again_later() {
    let store = Scripted::new(vec![Decision::Later { wait: HOUR }, Decision::Granted]);
    let (t, message) = asleep_on(store.clone()).await;
    let start = tokio::time::Instant::now();
    t.dispose();
    assert_eq!(message.await.unwrap(), Err(ThrottleError::Shutdown));
    assert_eq!(tokio::time::Instant::now(), start);
    assert_eq!(store.takes(), 1, "it did not ask again");
    assert!(store.given_back().is_empty(), "`Later` took nothing");
}

#[tokio::test(start_paused = true)]
async fn a_reservation_answered_after_dispose_is_given_back_at_once() {
    let hold = Arc::new(tokio::sync::Notify::new());
    let answers = vec![Decision::Reserved { wait: HOUR }];
    let store = Scripted::holding(answers, Some(hold.clone()));
    let (t, message) = asleep_on(store.clone()).await;
    // Disposed while its store call is in flight; the answer is a reservation.
    let start = tokio::time::Instant::now();
    t.dispose();
    hold.notify_one();
    assert_eq!(message.await.unwrap(), Err(ThrottleError::Shutdown));
    assert_eq!(tokio::time::Instant::now(), start);
    assert_eq!(store.given_back(), [(0, "acme".to_string(), 1)]);
}

#[tokio::test(start_paused = true)]
async fn after_dispose_a_shared_layer_refuses_at_its_gate() {
    let store = Scripted::new(vec![Decision::Granted]);
    let shared = SharedLayers {
        store: store.clone(),
        layers: vec![0],
        on_error: crate::config::OnError::Reject,
    };
    let clock = Arc::new(TokioClock::new());
    let t = Throttle::with_shared(vec![LayerSpec::new("t", 1, SEC)], clock, shared);
    t.dispose();
    let r = t.acquire(charge("acme")).await;
    assert_eq!(r.map(Permit::delivered), Err(ThrottleError::Shutdown));
    assert_eq!(store.takes(), 0, "it never asked the store");
}

#[tokio::test(start_paused = true)]
async fn a_reservation_due_within_the_grace_is_kept_through_the_drain() {
    let store = Scripted::new(vec![Decision::Reserved {
        wait: 2 * SEC_NANOS,
    }]);
    let (t, message) = asleep_on(store.clone()).await;
    let start = tokio::time::Instant::now();
    t.drain(30 * SEC);
    assert_eq!(message.await.unwrap(), Ok(()));
    assert_eq!(
        tokio::time::Instant::now() - start,
        2 * SEC,
        "at its instant"
    );
    assert!(store.given_back().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_reservation_due_after_the_grace_is_given_back_and_told_at_once() {
    let store = Scripted::new(vec![Decision::Reserved { wait: HOUR }]);
    let (t, message) = asleep_on(store.clone()).await;
    let start = tokio::time::Instant::now();
    t.drain(30 * SEC);
    assert_eq!(message.await.unwrap(), Err(ThrottleError::Shutdown));
    assert_eq!(tokio::time::Instant::now(), start, "at once");
    assert_eq!(store.given_back(), [(0, "acme".to_string(), 1)]);
}

#[tokio::test(start_paused = true)]
async fn during_the_drain_a_store_refusal_past_the_grace_is_a_shutdown() {
    for (retry_after, shutdown) in [(HOUR, true), (SEC_NANOS, false)] {
        let store = Scripted::new(vec![Decision::Refused {
            charge: 0,
            retry_after,
        }]);
        let shared = SharedLayers {
            store: store.clone(),
            layers: vec![0],
            on_error: crate::config::OnError::Reject,
        };
        let clock = Arc::new(TokioClock::new());
        let t = Throttle::with_shared(vec![LayerSpec::new("t", 1, SEC)], clock, shared);
        t.drain(30 * SEC);
        let r = t.acquire(charge("acme")).await.map(Permit::delivered);
        match shutdown {
            true => assert_eq!(r, Err(ThrottleError::Shutdown)),
            false => assert!(matches!(r, Err(ThrottleError::Limited { .. })), "{r:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_throttled_message_waits_again_ahead_of_later_ones_and_the_layer_slows() {
    let spec = LayerSpec {
        burst: 1,
        max_wait: 60 * SEC,
        adaptive: Some(1),
        adapt: crate::config::Adapt::Multiplicative,
        ..LayerSpec::new("account", 10, SEC)
    };
    let t = Arc::new(Throttle::new(vec![spec], Arc::new(TokioClock::new())));
    let first = t.acquire(charge("")).await.expect("granted at once");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let later: Vec<_> = (0..2)
        .map(|i| {
            let (t, order) = (t.clone(), order.clone());
            tokio::spawn(async move {
                t.acquire(charge("")).await.expect("granted").delivered();
                order.lock().unwrap().push(i);
            })
        })
        .collect();
    while t.waiting(0) < 2 {
        tokio::task::yield_now().await;
    }
    // Upstream throttled the first: the tokens stay taken, the limit is cut to 7.
    let again = first.throttled(true, crate::throttle::Teaches::Every);
    assert_eq!(t.effective_limit(0), Some(7));
    let retried = t.acquire_again(again).await.expect("granted again");
    assert!(
        order.lock().unwrap().is_empty(),
        "it went ahead of later arrivals"
    );
    // At the cut limit: a token every 1/7 s (tokio rounds the timer up to the millisecond).
    assert!(retried.waited() >= Duration::from_nanos(1_000_000_000 / 7));
    for l in later {
        l.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1]);
}

/// A message charged to two shared adaptive layers after a throttle reply: both carry the
/// reply to the store, which judges it from every replica's grants. When the store finds it
/// the tenant's alone in one of them (`Blamed`), the message takes nothing, waits that layer's
/// interval, and asks again without a second cut.
#[tokio::test(start_paused = true)]
async fn a_reply_the_store_blames_on_the_tenant_slows_the_message_and_cuts_once() {
    let blamed = Decision::Blamed { charge: 0 };
    let store = Scripted::new(vec![Decision::Granted, blamed, Decision::Granted]);
    let shared = SharedLayers {
        store: store.clone(),
        layers: vec![0, 1],
        on_error: crate::config::OnError::Reject,
    };
    let adaptive = |name: &str| LayerSpec {
        max_wait: 60 * SEC,
        adaptive: Some(1),
        ..LayerSpec::new(name, 100, SEC)
    };
    let specs = vec![adaptive("account"), adaptive("tenant")];
    let t = Throttle::with_shared(specs, Arc::new(TokioClock::new()), shared);
    let c = |layer: usize, key: &str| Charge {
        layer,
        key: key.to_string(),
        cost: 1,
        fair: String::new(),
        blame: "mallory".to_string(),
    };
    let mallory = t
        .acquire(vec![c(0, ""), c(1, "mallory")])
        .await
        .expect("granted");
    let again = mallory.throttled(true, crate::throttle::Teaches::Every);
    let start = tokio::time::Instant::now();
    t.acquire_again(again)
        .await
        .expect("granted after the wait")
        .delivered();
    let taken = store.taken.lock().unwrap().clone();
    let plain = vec![(0, false), (1, false)];
    assert_eq!(
        taken,
        vec![plain.clone(), vec![(0, true), (1, true)], plain]
    );
    assert!(
        start.elapsed() >= SEC,
        "it waited the account layer's interval"
    );
}
