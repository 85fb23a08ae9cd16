//! One test per sentence of the seeds' "Waiting and refusing", "Per key" and "Bucket modes"
//! sections (shared/seeds/), on tokio's paused clock: times are exact, nothing sleeps.

use std::time::Duration;

use crate::support::throttle::*;
use mailsluice::clock::Clock;
use mailsluice::throttle::{LayerSpec, Mode, Refill, ThrottleError};

// --- Waiting and refusing -------------------------------------------------------------------

/// "A bucket holds burst tokens and gains limit every intervalMs".
#[tokio::test(start_paused = true)]
async fn bucket_holds_burst_and_gains_limit_every_interval() {
    let mut spec = per_sec("t", 10);
    spec.burst = 20;
    let e = Env::new(vec![spec]);
    for _ in 0..20 {
        let p = e.take(0, "k", 1).await.unwrap();
        assert_eq!(p.waited(), Duration::ZERO);
    }
    let p = e.take(0, "k", 10).await.unwrap();
    assert_eq!(
        p.waited(),
        Duration::from_secs(1),
        "10 more tokens come in one interval"
    );
    assert_eq!(e.now(), Duration::from_secs(1));
}

/// "a message takes cost(message) of them".
#[tokio::test(start_paused = true)]
async fn a_message_takes_its_cost_in_tokens() {
    let e = Env::new(vec![per_sec("t", 10)]);
    e.spend(0, "k", 4).await;
    assert_eq!(e.remaining("t", "k"), 6);
    e.spend(0, "k", 1).await;
    assert_eq!(e.remaining("t", "k"), 5);
}

/// "In wait mode, the default, a message waits for its tokens".
#[tokio::test(start_paused = true)]
async fn wait_mode_is_the_default_and_waits_for_tokens() {
    assert_eq!(per_sec("t", 10).mode, Mode::Wait);
    let e = Env::new(vec![per_sec("t", 10)]);
    e.spend(0, "k", 10).await;
    let p = e.take(0, "k", 3).await.unwrap();
    assert_eq!(p.waited(), ms(300));
}

/// "first in, first out, behind those already waiting" — even a cheaper later message.
#[tokio::test(start_paused = true)]
async fn wait_mode_is_fifo_even_for_cheaper_later_message() {
    let e = Env::new(vec![per_sec("t", 10)]);
    e.spend(0, "k", 10).await;
    let big = e.spawn(vec![charge(0, "k", 5)]).await;
    let small = e.spawn(vec![charge(0, "k", 1)]).await;
    assert_eq!(e.t.waiting(0), 2);
    assert_eq!(big.await.unwrap().unwrap(), ms(500));
    assert_eq!(
        small.await.unwrap().unwrap(),
        ms(600),
        "1 token was there at 100 ms"
    );
}

/// "An abort of the caller takes it out of the queue and rejects".
#[tokio::test(start_paused = true)]
async fn abort_removes_waiter_and_takes_nothing() {
    let e = Env::new(vec![per_sec("t", 10)]);
    e.spend(0, "k", 10).await;
    let head = e.spawn(vec![charge(0, "k", 5)]).await;
    let behind = e.spawn(vec![charge(0, "k", 1)]).await;
    head.abort();
    assert!(head.await.unwrap_err().is_cancelled());
    assert_eq!(e.t.waiting(0), 1);
    assert_eq!(
        behind.await.unwrap().unwrap(),
        ms(100),
        "moved up, timer recomputed"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        e.remaining("t", "k"),
        10,
        "the aborted message took nothing"
    );
}

/// "A message the queue ahead of it would hold longer than maxWaitMs, counted from its
/// arrival, is answered at once ... with the wait in retryAfterMilliseconds".
#[tokio::test(start_paused = true)]
async fn over_max_wait_refused_at_once_with_estimate() {
    let mut spec = per_sec("t", 10);
    spec.max_wait = Duration::from_secs(1);
    let e = Env::new(vec![spec]);
    e.spend(0, "k", 10).await;
    let first = e.spawn(vec![charge(0, "k", 10)]).await; // exactly max_wait: may wait
    let r = e.take(0, "k", 1).await;
    assert_eq!(limited_after(r), ("t".to_string(), ms(1100)));
    assert_eq!(e.now(), Duration::ZERO, "answered at once");
    assert_eq!(e.t.waiting(0), 1);
    assert_eq!(first.await.unwrap().unwrap(), Duration::from_secs(1));
}

/// "... as is any that would wait in reject mode".
#[tokio::test(start_paused = true)]
async fn reject_mode_refuses_with_time_until_tokens() {
    let mut spec = per_sec("t", 10);
    spec.mode = Mode::Reject;
    let e = Env::new(vec![spec]);
    e.spend(0, "k", 8).await;
    let r = e.take(0, "k", 5).await;
    assert_eq!(limited_after(r), ("t".to_string(), ms(300)));
    assert_eq!(e.now(), Duration::ZERO);
    assert_eq!(e.remaining("t", "k"), 2, "a refusal takes nothing");
    tokio::time::advance(ms(300)).await;
    assert_eq!(e.take(0, "k", 5).await.unwrap().waited(), Duration::ZERO);
}

/// "A cost over burst, which no bucket could ever hold, is refused as configuration, not
/// retryable."
#[tokio::test(start_paused = true)]
async fn cost_over_burst_is_permanent() {
    let mut daily = LayerSpec::new("daily", 3, Duration::from_secs(86_400));
    daily.refill = Refill::FixedWindow;
    daily.burst = 100; // ignored: a fixed window holds `limit`
    let e = Env::new(vec![per_sec("t", 10), daily]);
    let over = ThrottleError::CostOverBurst {
        layer: "t".into(),
        cost: 11,
        burst: 10,
    };
    assert_eq!(e.take(0, "fresh", 11).await.unwrap_err(), over);
    let r =
        e.t.acquire(vec![charge(0, "k", 2), charge(1, "k", 4)])
            .await;
    let over = ThrottleError::CostOverBurst {
        layer: "daily".into(),
        cost: 4,
        burst: 3,
    };
    assert_eq!(r.unwrap_err(), over);
    assert_eq!(e.remaining("t", "k"), 10, "nothing taken on any layer");
}

// --- Per key -----------------------------------------------------------------------------

/// "key(message) chooses the bucket, such as a tenant's, so one tenant's burst does not hold
/// back the others."
#[tokio::test(start_paused = true)]
async fn one_key_burst_does_not_hold_back_another() {
    let e = Env::new(vec![per_sec("tenant", 10)]);
    e.spend(0, "acme", 10).await;
    let queued = e.spawn(vec![charge(0, "acme", 10)]).await;
    let other = e.take(0, "globex", 10).await.unwrap();
    assert_eq!(other.waited(), Duration::ZERO);
    assert_eq!(queued.await.unwrap().unwrap(), Duration::from_secs(1));
}

/// "No more than maxKeys buckets are kept: past it, the least used full one is dropped, which
/// loses nothing".
#[tokio::test(start_paused = true)]
async fn max_keys_drops_least_used_full_bucket_first() {
    let (events, _g) = Events::capture();
    let mut spec = per_sec("t", 10);
    spec.max_keys = 3;
    let e = Env::new(vec![spec]);
    e.spend(0, "a", 10).await; // full again at 1 s
    e.spend(0, "b", 1).await; // full at 100 ms
    e.spend(0, "c", 1).await; // full at 100 ms, used after b
    tokio::time::advance(ms(200)).await;
    e.spend(0, "d", 1).await;
    assert!(!e.t.holds(0, "b"), "b: full and least recently used");
    assert!(e.t.holds(0, "a") && e.t.holds(0, "c") && e.t.holds(0, "d"));
    assert_eq!(
        e.remaining("t", "a"),
        2,
        "the older, not full bucket kept its state"
    );
    assert!(
        events.named("ratelimit.evicted").is_empty(),
        "lossless: no warning"
    );
    assert_eq!(e.t.keys(0), 3);
}

/// "when none is full, the least used one with no waiter goes, its key starting full when it
/// comes back, ... and a warning says so".
#[tokio::test(start_paused = true)]
async fn max_keys_evicts_no_waiter_bucket_when_none_full_and_warns() {
    let (events, _g) = Events::capture();
    let mut spec = per_sec("t", 10);
    spec.max_keys = 2;
    let e = Env::new(vec![spec]);
    e.spend(0, "a", 10).await;
    e.spend(0, "b", 10).await;
    let waiter = e.spawn(vec![charge(0, "a", 1)]).await; // a is older but has a waiter
    e.spend(0, "c", 1).await;
    assert!(!e.t.holds(0, "b") && e.t.holds(0, "a") && e.t.holds(0, "c"));
    let warned = events.named("ratelimit.evicted");
    assert_eq!(warned.len(), 1);
    assert_eq!(warned[0].0, tracing::Level::WARN);
    assert!(
        warned[0].1.contains("layer=t ") && warned[0].1.contains("key=b "),
        "{warned:?}"
    );
    assert_eq!(
        e.remaining("t", "b"),
        10,
        "b starts full when it comes back"
    );
    assert_eq!(waiter.await.unwrap().unwrap(), ms(100));
}

/// A bucket with waiters is never dropped; with every bucket waiting, a new key is refused
/// with the layer's max_wait as the hint (every present waiter is gone by then).
#[tokio::test(start_paused = true)]
async fn max_keys_refuses_new_key_when_every_bucket_has_waiters() {
    let mut spec = per_sec("t", 10);
    spec.max_keys = 1;
    spec.max_wait = Duration::from_secs(5);
    let e = Env::new(vec![spec]);
    e.spend(0, "a", 10).await;
    let waiter = e.spawn(vec![charge(0, "a", 1)]).await;
    let r = e.take(0, "b", 1).await;
    assert_eq!(limited_after(r), ("t".to_string(), Duration::from_secs(5)));
    assert!(e.t.holds(0, "a") && e.t.keys(0) == 1);
    assert_eq!(waiter.await.unwrap().unwrap(), ms(100));
    assert_eq!(e.take(0, "b", 1).await.unwrap().waited(), Duration::ZERO);
}

/// "No more than maxQueue messages wait in one bucket, whatever maxWaitMs allows."
#[tokio::test(start_paused = true)]
async fn max_queue_bounds_waiters() {
    let mut spec = per_sec("t", 10);
    spec.max_queue = 2;
    spec.max_wait = Duration::from_secs(3600);
    let e = Env::new(vec![spec]);
    e.spend(0, "k", 10).await;
    let a = e.spawn(vec![charge(0, "k", 1)]).await;
    let b = e.spawn(vec![charge(0, "k", 1)]).await;
    let r = e.take(0, "k", 1).await;
    assert_eq!(
        limited_after(r),
        ("t".to_string(), ms(300)),
        "retry when it would be served"
    );
    assert_eq!(e.t.waiting(0), 2);
    let other_key = e.spawn(vec![charge(0, "j", 1)]).await;
    assert_eq!(
        other_key.await.unwrap().unwrap(),
        Duration::ZERO,
        "per bucket, not per layer"
    );
    assert_eq!(
        (a.await.unwrap().unwrap(), b.await.unwrap().unwrap()),
        (ms(100), ms(200))
    );
}

/// "Disposing of the transport stops the waits, each rejecting".
#[tokio::test(start_paused = true)]
async fn dispose_rejects_all_waiters() {
    let e = Env::new(vec![per_sec("t", 10), per_sec("u", 10)]);
    e.spend(0, "a", 10).await;
    e.spend(1, "x", 10).await;
    let waiters = vec![
        e.spawn(vec![charge(0, "a", 1)]).await,
        e.spawn(vec![charge(0, "a", 2)]).await,
        e.spawn(vec![charge(1, "x", 5)]).await,
    ];
    assert_eq!(e.t.waiting(0) + e.t.waiting(1), 3);
    e.t.dispose();
    for w in waiters {
        assert_eq!(w.await.unwrap(), Err(ThrottleError::Shutdown));
    }
    assert_eq!(e.now(), Duration::ZERO, "released at once");
    assert_eq!(e.t.waiting(0) + e.t.waiting(1), 0);
    // Afterwards nothing starts to wait; what the bucket grants at once still goes (a
    // message whose DATA ends during the shutdown grace, as with no layer).
    assert_eq!(
        e.take(0, "a", 1).await.unwrap_err(),
        ThrottleError::Shutdown
    );
    assert!(e.take(0, "fresh", 1).await.is_ok());
    assert_eq!(e.t.waiting(0), 0);
}

// --- Bucket modes ------------------------------------------------------------------------

/// Drip: "Gradually refills over time."
#[tokio::test(start_paused = true)]
async fn drip_refills_gradually() {
    let e = Env::new(vec![LayerSpec::new("t", 500, Duration::from_secs(3600))]);
    e.spend(0, "k", 500).await;
    tokio::time::advance(Duration::from_secs(36)).await;
    assert_eq!(e.remaining("t", "k"), 5);
    tokio::time::advance(Duration::from_secs(1800 - 36)).await;
    assert_eq!(e.remaining("t", "k"), 250);
    tokio::time::advance(Duration::from_secs(7200)).await;
    assert_eq!(e.remaining("t", "k"), 500, "never above size");
}

fn lifetime(burst: u64, idle_ttl: Duration) -> LayerSpec {
    let mut s = LayerSpec::new("life", 1, Duration::from_secs(1));
    s.refill = Refill::None;
    s.burst = burst;
    s.idle_ttl = idle_ttl;
    s
}

/// Lifetime: "Never refills between takes".
#[tokio::test(start_paused = true)]
async fn lifetime_cap_never_refills() {
    let mut spec = lifetime(3, Duration::from_secs(600));
    spec.mode = Mode::Reject;
    let e = Env::new(vec![spec]);
    e.spend(0, "k", 2).await;
    tokio::time::advance(Duration::from_secs(300)).await;
    e.spend(0, "k", 1).await;
    tokio::time::advance(Duration::from_secs(599)).await;
    assert_eq!(e.remaining("life", "k"), 0);
    let r = e.take(0, "k", 1).await;
    let until_forgotten = Duration::from_secs(1); // 600 s after the last take, not the first
    assert_eq!(limited_after(r), ("life".to_string(), until_forgotten));
}

/// Lifetime: "the key expires only after ttl seconds of inactivity".
#[tokio::test(start_paused = true)]
async fn lifetime_cap_forgotten_after_idle_ttl() {
    let mut spec = lifetime(2, Duration::from_secs(60));
    spec.max_wait = Duration::from_secs(60);
    let e = Env::new(vec![spec]);
    e.spend(0, "k", 2).await;
    tokio::time::advance(Duration::from_secs(20)).await;
    let p = e.take(0, "k", 2).await.unwrap();
    assert_eq!(
        p.waited(),
        Duration::from_secs(40),
        "waited until the key was forgotten"
    );
    assert_eq!(e.now(), Duration::from_secs(60));
    assert_eq!(e.remaining("life", "k"), 0);
}

fn window(name: &str, limit: u64, secs: u64) -> LayerSpec {
    let mut s = LayerSpec::new(name, limit, Duration::from_secs(secs));
    s.refill = Refill::FixedWindow;
    s.max_wait = Duration::from_secs(secs);
    s
}

/// Fixed window: "Starts full and fully refills exactly ttl seconds after the first take of
/// the window".
#[tokio::test(start_paused = true)]
async fn fixed_window_refills_exactly_interval_after_first_take() {
    let e = Env::new(vec![window("day", 3, 10)]);
    assert_eq!(e.remaining("day", "k"), 3, "starts full");
    tokio::time::advance(Duration::from_secs(2)).await;
    e.spend(0, "k", 3).await;
    tokio::time::advance(Duration::from_secs(3)).await;
    assert_eq!(e.remaining("day", "k"), 0, "no gradual refill");
    let p = e.take(0, "k", 3).await.unwrap();
    assert_eq!(
        e.now(),
        Duration::from_secs(12),
        "first take (2 s) + interval (10 s)"
    );
    assert_eq!(p.waited(), Duration::from_secs(7));
    let next_reset = e.clock.unix_secs_at(22_000_000_000);
    assert_eq!(e.t.peek("day", "k").unwrap().reset, next_reset);
}

/// Fixed window: "not extended by later takes, so the reset time is stable".
#[tokio::test(start_paused = true)]
async fn fixed_window_not_extended_by_later_takes() {
    let e = Env::new(vec![window("day", 5, 10)]);
    let reset = e.clock.unix_secs_at(10_000_000_000);
    for _ in 0..4 {
        e.spend(0, "k", 1).await;
        assert_eq!(e.t.peek("day", "k").unwrap().reset, reset);
        tokio::time::advance(Duration::from_secs(2)).await;
    }
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(e.t.peek("day", "k").unwrap().remaining, 5);
}

/// Tiers: "Each tier is a distinct ... key, so a CX goodwill bump ... starts a fresh full
/// window immediately".
#[tokio::test(start_paused = true)]
async fn tier_bump_starts_a_fresh_full_window() {
    let e = Env::new(vec![window("basic", 2, 86_400), window("cx", 5, 86_400)]);
    e.spend(0, "event-1", 2).await;
    assert_eq!(e.remaining("basic", "event-1"), 0);
    e.spend(1, "event-1", 1).await;
    assert_eq!(e.remaining("cx", "event-1"), 4);
    assert_eq!(
        e.remaining("basic", "event-1"),
        0,
        "the prior tier's use stays"
    );
}

/// peek(): "returns the current allowance without taking a token".
#[tokio::test(start_paused = true)]
async fn peek_takes_nothing() {
    let e = Env::new(vec![per_sec("t", 10), window("day", 3, 100)]);
    assert!(e.t.peek("nope", "k").is_none(), "unknown layer");
    let fresh = e.t.peek("t", "k").unwrap();
    assert_eq!(
        (fresh.limit, fresh.remaining, fresh.reset, fresh.waiting),
        (10, 10, 0, 0)
    );
    assert!(!e.t.holds(0, "k"), "peek creates nothing");
    e.spend(0, "k", 10).await;
    let w = e.spawn(vec![charge(0, "k", 1)]).await;
    for _ in 0..5 {
        let p = e.t.peek("t", "k").unwrap();
        assert_eq!((p.remaining, p.waiting), (0, 1));
    }
    assert_eq!(
        w.await.unwrap().unwrap(),
        ms(100),
        "peeks did not delay the waiter"
    );
    e.spend(1, "k", 1).await;
    let p = e.t.peek("day", "k").unwrap();
    assert_eq!((p.limit, p.remaining), (3, 2));
    assert_eq!(p.reset, e.clock.unix_secs_at(100_000_000_000 + 100_000_000));
}

/// Rollback: when one layer refuses, what the others granted is given back.
#[tokio::test(start_paused = true)]
async fn rollback_across_layers_leaves_the_first_layer_remaining_unchanged() {
    let mut daily = window("daily", 2, 86_400);
    daily.mode = Mode::Reject;
    let e = Env::new(vec![per_sec("tenant", 10), daily]);
    e.spend(1, "acme", 2).await;
    let before = e.remaining("tenant", "acme");
    let r =
        e.t.acquire(vec![charge(0, "acme", 3), charge(1, "acme", 1)])
            .await;
    assert_eq!(limited_after(r).0, "daily");
    assert_eq!(e.remaining("tenant", "acme"), before);
    assert_eq!(before, 10);
}
