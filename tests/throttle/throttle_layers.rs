//! Stacked layers, cancellation in the middle of a queue, give-back and permits, on tokio's
//! paused clock.

use std::sync::Arc;
use std::time::Duration;

use crate::support::throttle::*;
use mailsluice::clock::TokioClock;
use mailsluice::throttle::store::local::LocalStore;
use mailsluice::throttle::{LayerSpec, Mode, OnError, SharedLayers, Throttle};

#[tokio::test(start_paused = true)]
async fn abort_in_middle_of_queue_moves_those_behind_up() {
    let e = Env::new(vec![per_sec("t", 10)]);
    e.spend(0, "k", 10).await;
    let a = e.spawn(vec![charge(0, "k", 3)]).await;
    let b = e.spawn(vec![charge(0, "k", 3)]).await;
    let c = e.spawn(vec![charge(0, "k", 3)]).await;
    b.abort();
    assert!(b.await.unwrap_err().is_cancelled());
    assert_eq!(e.t.waiting(0), 2);
    assert_eq!(e.t.peek("t", "k").unwrap().waiting, 2);
    // A newcomer's estimate is refolded without the aborted one: A 300, C 600, D 700.
    let d = e.spawn(vec![charge(0, "k", 1)]).await;
    assert_eq!(a.await.unwrap().unwrap(), ms(300));
    assert_eq!(
        c.await.unwrap().unwrap(),
        ms(600),
        "C moved up into B's place"
    );
    assert_eq!(d.await.unwrap().unwrap(), ms(700));
}

#[tokio::test(start_paused = true)]
async fn abort_while_waiting_on_second_layer_gives_back_the_first() {
    let e = Env::new(vec![per_sec("tenant", 10), per_sec("account", 10)]);
    e.spend(1, "all", 10).await;
    let m = e
        .spawn(vec![charge(0, "acme", 2), charge(1, "all", 1)])
        .await;
    assert_eq!(
        e.remaining("tenant", "acme"),
        8,
        "held while waiting on the account"
    );
    assert_eq!(e.t.waiting(1), 1);
    m.abort();
    assert!(m.await.unwrap_err().is_cancelled());
    assert_eq!(
        e.remaining("tenant", "acme"),
        10,
        "given back: the abort took nothing"
    );
    assert_eq!(e.t.waiting(1), 0);
    assert_eq!(e.now(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn refusal_at_a_later_layer_after_waiting_gives_back_the_earlier() {
    let mut account = LayerSpec::new("account", 1, Duration::from_secs(10));
    account.max_wait = Duration::from_secs(5);
    let e = Env::new(vec![per_sec("tenant", 10), account]);
    e.spend(0, "acme", 10).await;
    let m = e
        .spawn(vec![charge(0, "acme", 1), charge(1, "all", 1)])
        .await;
    e.spend(1, "all", 1).await; // the account's only token goes while m waits on the tenant
    let r = m.await.unwrap();
    assert_eq!(limited_after(r), ("account".to_string(), ms(9_900)));
    assert_eq!(e.now(), ms(100));
    assert_eq!(
        e.remaining("tenant", "acme"),
        1,
        "the tenant token m took is back"
    );
}

#[tokio::test(start_paused = true)]
async fn reject_layers_are_decided_at_arrival_before_any_wait() {
    let mut account = per_sec("account", 10);
    account.mode = Mode::Reject;
    let e = Env::new(vec![per_sec("tenant", 10), account]);
    e.spend(0, "acme", 10).await;
    let m = e
        .spawn(vec![charge(0, "acme", 1), charge(1, "all", 1)])
        .await;
    assert_eq!(e.remaining("account", "all"), 9, "taken at arrival");
    assert_eq!(m.await.unwrap().unwrap(), ms(100));
    e.spend(1, "all", 10).await; // full again at 100 ms: m took 1 at 0
    let r =
        e.t.acquire(vec![charge(0, "acme", 1), charge(1, "all", 1)])
            .await;
    assert_eq!(limited_after(r), ("account".to_string(), ms(100)));
    assert_eq!(e.t.waiting(0), 0, "refused before queueing on the tenant");
    assert_eq!(e.now(), ms(100));
}

#[tokio::test(start_paused = true)]
async fn deadline_is_the_smallest_max_wait_of_the_charged_layers() {
    let mut account = per_sec("account", 10);
    account.max_wait = Duration::from_secs(1);
    let e = Env::new(vec![per_sec("tenant", 10), account]);
    e.spend(0, "acme", 10).await;
    let first = e.spawn(vec![charge(0, "acme", 10)]).await;
    let r =
        e.t.acquire(vec![charge(0, "acme", 10), charge(1, "all", 1)])
            .await;
    assert_eq!(
        limited_after(r),
        ("tenant".to_string(), Duration::from_secs(2))
    );
    assert_eq!(e.remaining("account", "all"), 10, "nothing taken up front");
    let alone = e.spawn(vec![charge(0, "acme", 10)]).await; // 25 s allowed alone
    assert_eq!(first.await.unwrap().unwrap(), Duration::from_secs(1));
    assert_eq!(alone.await.unwrap().unwrap(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn give_back_lets_the_head_go_sooner() {
    let e = Env::new(vec![per_sec("t", 10)]);
    e.spend(0, "k", 5).await;
    let permit = e.take(0, "k", 5).await.unwrap();
    let head = e.spawn(vec![charge(0, "k", 5)]).await;
    permit.upstream_failed();
    assert_eq!(head.await.unwrap().unwrap(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn upstream_failure_gives_back_unless_the_layer_charges_failures() {
    let mut charged = per_sec("charged", 10);
    charged.charge_failures = true;
    let e = Env::new(vec![per_sec("t", 10), charged]);
    let p =
        e.t.acquire(vec![charge(0, "k", 3), charge(1, "k", 3)])
            .await
            .unwrap();
    assert_eq!(p.charges().len(), 2);
    p.upstream_failed();
    assert_eq!(e.remaining("t", "k"), 10);
    assert_eq!(e.remaining("charged", "k"), 7);
}

#[tokio::test(start_paused = true)]
async fn delivered_or_dropped_permit_keeps_its_tokens() {
    let e = Env::new(vec![per_sec("t", 10)]);
    e.take(0, "k", 3).await.unwrap().delivered();
    drop(e.take(0, "k", 3).await.unwrap());
    assert_eq!(e.remaining("t", "k"), 4);
}

#[tokio::test(start_paused = true)]
async fn give_back_is_capped_at_burst() {
    let e = Env::new(vec![per_sec("t", 10)]);
    let p = e.take(0, "k", 6).await.unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    p.upstream_failed();
    assert_eq!(e.remaining("t", "k"), 10);
}

#[tokio::test(start_paused = true)]
async fn waiting_counts_waiters_across_keys() {
    let e = Env::new(vec![per_sec("t", 10)]);
    e.spend(0, "a", 10).await;
    e.spend(0, "b", 10).await;
    let hs = vec![
        e.spawn(vec![charge(0, "a", 1)]).await,
        e.spawn(vec![charge(0, "b", 1)]).await,
        e.spawn(vec![charge(0, "b", 1)]).await,
    ];
    assert_eq!(e.t.waiting(0), 3);
    assert_eq!(e.t.waiting(7), 0, "unknown layer");
    for h in hs {
        h.await.unwrap().unwrap();
    }
    assert_eq!(e.t.waiting(0), 0);
}

#[tokio::test(start_paused = true)]
async fn a_shared_layer_serves_messages_of_all_tenants_in_arrival_order() {
    let e = Env::new(vec![per_sec("tenant", 100), per_sec("account", 2)]);
    e.spend(1, "all", 2).await;
    let mut hs = Vec::new();
    for tenant in ["a", "b", "c", "a"] {
        hs.push(
            e.spawn(vec![charge(0, tenant, 1), charge(1, "all", 1)])
                .await,
        );
    }
    let mut at = Vec::new();
    for h in hs {
        at.push(h.await.unwrap().unwrap());
    }
    assert_eq!(at, vec![ms(500), ms(1000), ms(1500), ms(2000)]);
}

#[tokio::test(start_paused = true)]
async fn specs_and_layer_index() {
    let e = Env::new(vec![per_sec("tenant", 10), per_sec("account", 14)]);
    assert_eq!(e.t.layer_index("account"), Some(1));
    assert_eq!(e.t.layer_index("nope"), None);
    assert_eq!(e.t.specs()[1].limit, 14);
}

#[test]
fn throttle_is_send_sync_and_its_acquire_future_is_send() {
    fn send<T: Send>(_: T) {}
    fn send_sync<T: Send + Sync>() {}
    send_sync::<mailsluice::throttle::Throttle>();
    send_sync::<mailsluice::throttle::Permit>();
    let clock = std::sync::Arc::new(mailsluice::clock::FakeClock::new(0));
    let t = mailsluice::throttle::Throttle::new(vec![per_sec("t", 1)], clock);
    send(t.acquire(vec![charge(0, "k", 1)]));
}

/// Many tasks on several threads race for a lifetime cap: exactly the cap is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_takes_on_threads_never_exceed_the_cap() {
    let mut cap = LayerSpec::new("cap", 1, Duration::from_secs(1));
    cap.refill = mailsluice::throttle::Refill::None;
    cap.burst = 1_000;
    cap.mode = Mode::Reject;
    let e = Env::new(vec![cap]);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let t = e.t.clone();
            tokio::spawn(async move {
                let mut granted = 0u64;
                for _ in 0..400 {
                    if let Ok(p) = t.acquire(vec![charge(0, "k", 1)]).await {
                        p.delivered();
                        granted += 1;
                    }
                }
                granted
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 1_000);
    assert_eq!(e.remaining("cap", "k"), 0);
}

#[tokio::test(start_paused = true)]
async fn logs_limited_at_info_waiting_and_waited_at_debug() {
    let (events, _g) = Events::capture();
    let mut spec = per_sec("t", 10);
    spec.max_wait = Duration::from_secs(1);
    let e = Env::new(vec![spec]);
    e.spend(0, "acme", 10).await;
    let p = e.take(0, "acme", 3).await.unwrap();
    assert_eq!(p.waited(), ms(300));
    assert!(e.take(0, "acme", 10).await.is_ok());
    let queued = e.spawn(vec![charge(0, "acme", 10)]).await;
    assert!(e.take(0, "acme", 1).await.is_err());
    assert!(queued.await.unwrap().is_ok());
    let waiting = events.named("ratelimit.waiting");
    assert_eq!(waiting[0].0, tracing::Level::DEBUG);
    assert!(waiting[0]
        .1
        .contains("layer=t key=acme cost=3 position=0 estimate_ms=300"));
    let waited = events.named("ratelimit.waited");
    assert!(
        waited[0]
            .1
            .contains("layer=t key=acme cost=3 waited_ms=300"),
        "{waited:?}"
    );
    let limited = events.named("ratelimit.limited");
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0].0, tracing::Level::INFO);
    let f = &limited[0].1;
    assert!(
        f.contains("key=acme cost=1 retry_after_ms=1100 reason=max_wait"),
        "{f}"
    );
}

/// A message a fallback carried: the tokens of the layers it did not go through go back (a
/// shared one's too), the others stay until upstream's verdict.
#[tokio::test(start_paused = true)]
async fn a_permit_gives_back_only_the_layers_its_message_did_not_go_through() {
    Events::install();
    let clock = Arc::new(TokioClock::new());
    let specs = vec![
        per_sec("shared", 5),
        per_sec("local", 5),
        per_sec("kept", 5),
    ];
    let store = Arc::new(LocalStore::for_layers(&specs, clock.clone()));
    let shared = SharedLayers {
        store,
        layers: vec![0],
        on_error: OnError::Reject,
    };
    let t = Throttle::with_shared(specs, clock, shared);
    let charges = vec![charge(0, "k", 2), charge(1, "k", 2), charge(2, "k", 2)];
    let mut permit = t.acquire(charges).await.unwrap();
    let remaining = async |layer: &str| t.peek_async(layer, "k").await.unwrap().unwrap().remaining;
    assert_eq!(
        (
            remaining("shared").await,
            remaining("local").await,
            remaining("kept").await
        ),
        (3, 3, 3)
    );
    permit.not_sent_through(|layer| layer != 2);
    settle().await;
    assert_eq!(
        (
            remaining("shared").await,
            remaining("local").await,
            remaining("kept").await
        ),
        (5, 5, 3)
    );
    permit.upstream_failed();
    settle().await;
    assert_eq!(remaining("kept").await, 5);
    assert_eq!(remaining("shared").await, 5, "nothing given back twice");
}

/// A fixed layer's limit set at run time (an account's own rate): its buckets are converted
/// and a message already waiting is served at the new rate; an adaptive layer keeps its own.
#[tokio::test(start_paused = true)]
async fn a_limit_set_at_run_time_converts_the_buckets_and_speeds_up_the_queue() {
    let mut adaptive = per_sec("learning", 10);
    adaptive.adaptive = Some(1);
    let e = Env::new(vec![per_sec("account", 1), adaptive]);
    e.spend(0, "", 1).await;
    // At 1 a second it would wait a whole second.
    let waiter = e.spawn(vec![charge(0, "", 1)]).await;
    assert!(e.t.set_limit(0, 10));
    assert!(!e.t.set_limit(0, 10), "unchanged");
    assert_eq!(e.t.effective_limit(0), Some(10));
    assert_eq!(waiter.await.unwrap().unwrap(), ms(100));
    assert!(!e.t.set_limit(1, 5), "an adaptive layer learns its own");
    assert_eq!(e.t.effective_limit(1), Some(10));
}
