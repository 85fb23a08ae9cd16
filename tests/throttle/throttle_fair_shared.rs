//! Fair share on a shared layer (`store = "redis"`), on tokio's paused clock: a store that
//! answers as Redis does (granted, or reserved for a later instant, in asking order) stands in
//! for Redis, so the gate's turn and the reservation's hold are what is tested.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::throttle::*;
use mailsluice::clock::{Clock, TokioClock};
use mailsluice::throttle::bucket::{Bucket, State};
use mailsluice::throttle::store::{Decision, Store, StoreCharge, StoreError, StoreFuture};
use mailsluice::throttle::{OnError, Peek, SharedLayers, Throttle};

/// One bucket for every charge, reserving like the Redis take script.
struct Reserving {
    bucket: Bucket,
    state: Mutex<State>,
    clock: Arc<TokioClock>,
    /// Instants of the tokens' use (grant, or reservation due), for the bound.
    uses: Mutex<Vec<Duration>>,
}

impl Store for Reserving {
    fn take<'a>(&'a self, c: &'a [StoreCharge<'a>], max_wait: u64) -> StoreFuture<'a, Decision> {
        Box::pin(async move {
            let now = self.clock.now();
            let mut st = self.state.lock().unwrap();
            let (at, next) = self.bucket.reserve(*st, now, c[0].cost).unwrap();
            if at - now > max_wait {
                let retry_after = at - now;
                return Ok(Decision::Refused {
                    charge: 0,
                    retry_after,
                });
            }
            *st = next;
            self.uses.lock().unwrap().push(Duration::from_nanos(at));
            Ok(match at == now {
                true => Decision::Granted,
                false => Decision::Reserved { wait: at - now },
            })
        })
    }

    fn give_back<'a>(&'a self, c: &'a [StoreCharge<'a>]) -> StoreFuture<'a, ()> {
        let mut st = self.state.lock().unwrap();
        *st = self.bucket.give_back(*st, self.clock.now(), c[0].cost);
        Box::pin(async { Ok(()) })
    }

    fn peek<'a>(&'a self, _: usize, _: &'a str) -> StoreFuture<'a, Peek> {
        Box::pin(async { Err(StoreError::Unavailable("not in this test".into())) })
    }
}

/// A's 100 messages, then B's one 0.5 s later, on a shared 5/s layer: B's wait and the uses.
async fn newcomer_behind_backlog(fair: bool) -> (Duration, Vec<Duration>) {
    Events::install();
    let clock = Arc::new(TokioClock::new());
    let mut spec = per_sec("account", 5);
    (spec.fair, spec.max_wait) = (fair, Duration::from_secs(1_000));
    let store = Arc::new(Reserving {
        bucket: spec.bucket(),
        state: Mutex::new(State::default()),
        clock: clock.clone(),
        uses: Mutex::default(),
    });
    let shared = SharedLayers {
        store: store.clone(),
        layers: vec![0],
        on_error: OnError::Reject,
    };
    let t = Arc::new(Throttle::with_shared(vec![spec], clock.clone(), shared));
    let e = Env { t, clock };
    let mut a = Vec::new();
    for _ in 0..100 {
        a.push(e.spawn(vec![fair_charge(0, "", "a", 1)]).await);
    }
    tokio::time::sleep(ms(500)).await;
    let b = e.spawn(vec![fair_charge(0, "", "b", 1)]).await;
    let waited = b.await.unwrap().unwrap() - ms(500);
    let mut last = Duration::ZERO;
    for h in a {
        let at = h.await.unwrap().unwrap();
        assert!(at >= last, "A's order kept");
        last = at;
    }
    let uses = store.uses.lock().unwrap().clone();
    (waited, uses)
}

fn assert_within_bound(uses: &[Duration], burst: u128, limit: u128) {
    let mut uses = uses.to_vec();
    uses.sort();
    for i in 0..uses.len() {
        for j in i..uses.len() {
            let span = (uses[j] - uses[i]).as_nanos();
            let n = (j - i + 1) as u128;
            assert!(n * 1_000_000_000 <= burst * 1_000_000_000 + limit * span);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_shared_fair_layer_serves_a_newcomer_within_one_turn_in_its_replica() {
    let (waited, uses) = newcomer_behind_backlog(true).await;
    assert!(waited <= ms(400), "B waited {waited:?}");
    assert_eq!(uses.len(), 101);
    assert_within_bound(&uses, 5, 5);
}

#[tokio::test(start_paused = true)]
async fn a_shared_layer_without_fair_by_reserves_in_asking_order() {
    let (waited, uses) = newcomer_behind_backlog(false).await;
    assert!(waited >= ms(18_000), "B waited {waited:?}");
    assert_within_bound(&uses, 5, 5);
}
