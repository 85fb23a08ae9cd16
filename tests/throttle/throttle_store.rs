//! The store contract (`src/throttle/store/mod.rs`), one suite over both stores: every test
//! body below runs against the in-process `LocalStore` (the reference) and against the
//! `RedisStore` on a private `redis-server`. Bucket math is checked with a fake clock: the
//! Redis store is given it as the scripts' `now` (a test-only override of Redis `TIME`).
//!
//! Where the contract lets the stores differ, the body says so: a store that alone serves its
//! buckets answers `Later` (nothing taken), a shared one `Reserved` (taken, usable later).

use std::sync::Arc;
use std::time::Duration;

use crate::support::redis::{store_options, RedisServer};
use crate::support::throttle::ch;
use mailsluice::clock::{FakeClock, Nanos};
use mailsluice::throttle::bucket::{Bucket, State, Take};
use mailsluice::throttle::store::local::LocalStore;
use mailsluice::throttle::store::redis::RedisStore;
use mailsluice::throttle::store::{Decision, Store, StoreError};
use mailsluice::throttle::{LayerSpec, Refill};

const MS: Nanos = 1_000_000;
const SEC: Nanos = 1_000 * MS;

pub struct Fixture {
    pub store: Arc<dyn Store>,
    pub clock: Arc<FakeClock>,
    /// Nanoseconds per unit of the store's own time (1 local, 1000 Redis: microseconds).
    pub unit: u64,
    /// A shared store reserves (`Reserved`); the local one answers `Later`.
    pub shared: bool,
    /// The private Redis, running until the fixture drops.
    _server: Option<RedisServer>,
}

/// 0 `tenant`: drip 10/s; 1 `daily`: fixed window of 3 per day; 2 `life`: lifetime cap of 5,
/// forgotten after an hour; 3 `odd`: drip 3 per second, burst 7 (waits that do not divide).
pub fn specs() -> Vec<LayerSpec> {
    let day = Duration::from_secs(86_400);
    vec![
        LayerSpec::new("tenant", 10, Duration::from_secs(1)),
        LayerSpec {
            refill: Refill::FixedWindow,
            ..LayerSpec::new("daily", 3, day)
        },
        LayerSpec {
            refill: Refill::None,
            burst: 5,
            idle_ttl: Duration::from_secs(3_600),
            ..LayerSpec::new("life", 5, Duration::from_secs(1))
        },
        LayerSpec {
            burst: 7,
            ..LayerSpec::new("odd", 3, Duration::from_secs(1))
        },
    ]
}

pub fn local(origin: u64) -> Fixture {
    let clock = Arc::new(FakeClock::new(origin));
    let layers = specs()
        .iter()
        .map(|s| (s.name.clone(), s.bucket(), s.max_keys))
        .collect();
    Fixture {
        store: Arc::new(LocalStore::new(layers, clock.clone())),
        clock,
        unit: 1,
        shared: false,
        _server: None,
    }
}

pub fn redis(origin: u64) -> Option<Fixture> {
    let server = RedisServer::start()?;
    let clock = Arc::new(FakeClock::new(origin));
    let store = RedisStore::new(&store_options(vec![server.url()], false), &specs())
        .unwrap()
        .with_test_clock(clock.clone());
    Some(Fixture {
        store: Arc::new(store),
        clock,
        unit: 1_000,
        shared: true,
        _server: Some(server),
    })
}

/// Each body runs once per store: `<name>::local` and `<name>::redis`.
macro_rules! both {
    ($($name:ident($origin:expr);)*) => {$(
        mod $name {
            #[tokio::test]
            async fn local() {
                super::$name(super::local($origin)).await;
            }
            #[tokio::test]
            async fn redis() {
                if let Some(f) = super::redis($origin) {
                    super::$name(f).await;
                }
            }
        }
    )*};
}

both! {
    takes_from_all_layers_or_from_none(1_700_000_000);
    waits_within_max_wait(0);
    over_capacity_and_give_back(0);
    refusal_says_when_and_commits_nothing(1_700_000_000);
    fixed_window_refills_at_its_end(1_700_000_000);
    lifetime_cap_is_forgotten_after_idle_ttl(1_700_000_000);
    waiters_are_served_in_order_of_their_takes(1_700_000_000);
    mirrors_the_bucket_math(1_700_000_000);
}

async fn takes_from_all_layers_or_from_none(f: Fixture) {
    let s = &f.store;
    let both = [ch(0, "acme", 2), ch(1, "acme", 2)];
    assert_eq!(s.take(&both, SEC).await.unwrap(), Decision::Granted);
    assert_eq!(s.peek(0, "acme").await.unwrap().remaining, 8);
    assert_eq!(s.peek(1, "acme").await.unwrap().remaining, 1);
    // The daily layer cannot give 2 more today: nothing is taken from the tenant layer.
    let d = s.take(&both, SEC).await.unwrap();
    assert_eq!(
        d,
        Decision::Refused {
            charge: 1,
            retry_after: 86_400 * SEC
        }
    );
    assert_eq!(s.peek(0, "acme").await.unwrap().remaining, 8);
    assert_eq!(s.peek(1, "acme").await.unwrap().remaining, 1);
}

async fn waits_within_max_wait(f: Fixture) {
    let s = &f.store;
    assert_eq!(
        s.take(&[ch(0, "k", 10)], 0).await.unwrap(),
        Decision::Granted
    );
    let d = s.take(&[ch(0, "k", 3)], SEC).await.unwrap();
    assert_eq!(s.peek(0, "k").await.unwrap().remaining, 0);
    f.clock.advance(Duration::from_millis(300));
    match d {
        // Nothing taken: at the instant it named, the take succeeds.
        Decision::Later { wait } if !f.shared => {
            assert_eq!(wait, 300 * MS);
            assert_eq!(
                s.take(&[ch(0, "k", 3)], SEC).await.unwrap(),
                Decision::Granted
            );
        }
        // Taken as of that instant: the three tokens of 300 ms are already spent.
        Decision::Reserved { wait } if f.shared => {
            assert_eq!(wait, 300 * MS);
            assert_eq!(s.peek(0, "k").await.unwrap().remaining, 0);
            let next = s.take(&[ch(0, "k", 1)], SEC).await.unwrap();
            assert_eq!(next, Decision::Reserved { wait: 100 * MS });
        }
        other => panic!("unexpected {other:?}"),
    }
}

async fn over_capacity_and_give_back(f: Fixture) {
    let s = &f.store;
    let d = s.take(&[ch(0, "k", 1), ch(1, "k", 4)], SEC).await.unwrap();
    assert_eq!(
        d,
        Decision::OverCapacity {
            charge: 1,
            capacity: 3
        }
    );
    assert_eq!(s.peek(0, "k").await.unwrap().remaining, 10);
    assert_eq!(
        s.take(&[ch(1, "k", 3)], SEC).await.unwrap(),
        Decision::Granted
    );
    s.give_back(&[ch(1, "k", 5)]).await.unwrap();
    let p = s.peek(1, "k").await.unwrap();
    assert_eq!((p.limit, p.remaining, p.reset), (3, 3, 86_400));
    assert!(matches!(
        s.peek(7, "k").await,
        Err(StoreError::UnknownLayer(7))
    ));
}

async fn refusal_says_when_and_commits_nothing(f: Fixture) {
    let s = &f.store;
    assert_eq!(
        s.take(&[ch(0, "k", 10)], 0).await.unwrap(),
        Decision::Granted
    );
    let d = s.take(&[ch(0, "k", 5)], 0).await.unwrap();
    assert_eq!(
        d,
        Decision::Refused {
            charge: 0,
            retry_after: 500 * MS
        }
    );
    let d = s.take(&[ch(0, "k", 5)], 499 * MS).await.unwrap();
    assert!(matches!(d, Decision::Refused { .. }), "{d:?}");
    f.clock.advance(Duration::from_millis(500));
    assert_eq!(
        s.take(&[ch(0, "k", 5)], 0).await.unwrap(),
        Decision::Granted
    );
    // Other keys are other buckets.
    assert_eq!(
        s.take(&[ch(0, "j", 10)], 0).await.unwrap(),
        Decision::Granted
    );
}

async fn fixed_window_refills_at_its_end(f: Fixture) {
    let s = &f.store;
    assert_eq!(
        s.take(&[ch(1, "k", 2)], 0).await.unwrap(),
        Decision::Granted
    );
    f.clock.advance(Duration::from_secs(3_600));
    assert_eq!(
        s.take(&[ch(1, "k", 1)], 0).await.unwrap(),
        Decision::Granted
    );
    let p = s.peek(1, "k").await.unwrap();
    assert_eq!((p.remaining, p.reset), (0, 1_700_000_000 + 86_400));
    let d = s.take(&[ch(1, "k", 1)], 0).await.unwrap();
    let rest = (86_400 - 3_600) * SEC;
    assert_eq!(
        d,
        Decision::Refused {
            charge: 0,
            retry_after: rest
        }
    );
    f.clock.advance(Duration::from_nanos(rest));
    assert_eq!(
        s.take(&[ch(1, "k", 3)], 0).await.unwrap(),
        Decision::Granted
    );
    let p = s.peek(1, "k").await.unwrap();
    assert_eq!((p.remaining, p.reset), (0, 1_700_000_000 + 2 * 86_400));
}

async fn lifetime_cap_is_forgotten_after_idle_ttl(f: Fixture) {
    let s = &f.store;
    assert_eq!(
        s.take(&[ch(2, "k", 3)], 0).await.unwrap(),
        Decision::Granted
    );
    f.clock.advance(Duration::from_secs(1_800));
    assert_eq!(
        s.take(&[ch(2, "k", 2)], 0).await.unwrap(),
        Decision::Granted
    );
    // Idle for an hour from the last take, not the first.
    let d = s.take(&[ch(2, "k", 1)], 0).await.unwrap();
    assert_eq!(
        d,
        Decision::Refused {
            charge: 0,
            retry_after: 3_600 * SEC
        }
    );
    s.give_back(&[ch(2, "k", 1)]).await.unwrap();
    assert_eq!(s.peek(2, "k").await.unwrap().remaining, 1);
    assert_eq!(
        s.take(&[ch(2, "k", 1)], 0).await.unwrap(),
        Decision::Granted
    );
    f.clock.advance(Duration::from_secs(3_600));
    assert_eq!(s.peek(2, "k").await.unwrap().remaining, 5);
    assert_eq!(
        s.take(&[ch(2, "k", 5)], 0).await.unwrap(),
        Decision::Granted
    );
}

async fn waiters_are_served_in_order_of_their_takes(f: Fixture) {
    let s = &f.store;
    assert_eq!(
        s.take(&[ch(0, "k", 10)], 0).await.unwrap(),
        Decision::Granted
    );
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(s.take(&[ch(0, "k", 5)], 2 * SEC).await.unwrap());
    }
    let late = s.take(&[ch(0, "k", 5)], 1_500 * MS).await.unwrap();
    if f.shared {
        // Each reservation queues after the one before it, whoever made it.
        let waits = [500 * MS, 1_000 * MS, 1_500 * MS].map(|wait| Decision::Reserved { wait });
        assert_eq!(answers, waits);
        let refused = Decision::Refused {
            charge: 0,
            retry_after: 2 * SEC,
        };
        assert_eq!(late, refused);
        // Giving a reservation back lets the next one have its place.
        s.give_back(&[ch(0, "k", 5)]).await.unwrap();
        let d = s.take(&[ch(0, "k", 5)], 2 * SEC).await.unwrap();
        assert_eq!(d, Decision::Reserved { wait: 1_500 * MS });
    } else {
        // Nothing is taken before its instant: the caller's queue keeps the order.
        assert_eq!(answers, [Decision::Later { wait: 500 * MS }; 3]);
        assert_eq!(late, Decision::Later { wait: 500 * MS });
    }
}

/// A pseudo-random run (fixed seed) of takes and give-backs on every refill mode, each answer
/// compared with `bucket/` itself, computed in the store's unit of time.
async fn mirrors_the_bucket_math(f: Fixture) {
    let s = &f.store;
    let specs = specs();
    let unit = f.unit;
    let models: Vec<Bucket> = specs
        .iter()
        .map(|spec| {
            let per_unit = |d: Duration| (d.as_nanos() as u64 / unit).max(1);
            match spec.refill {
                Refill::Drip => Bucket::drip(spec.burst, spec.limit, per_unit(spec.interval)),
                Refill::FixedWindow => Bucket::fixed_window(spec.limit, per_unit(spec.interval)),
                Refill::None => Bucket::lifetime(spec.burst, per_unit(spec.idle_ttl)),
            }
        })
        .collect();
    let mut states = std::collections::HashMap::<(usize, &str), State>::new();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    // Layer 2's hour and layer 1's day would not move in a few seconds: use tenant and odd,
    // with a short visit of the others.
    for step in 0..400 {
        f.clock.advance(Duration::from_millis(rand(250)));
        let now = f.clock_now() / unit;
        let layer = [0, 3, 3, 0, 1, 2][rand(6) as usize];
        let key = ["a", "b"][rand(2) as usize];
        let cost = rand(models[layer].capacity() + 1);
        let st = states.get(&(layer, key)).copied().unwrap_or_default();
        if rand(8) == 0 {
            s.give_back(&[ch(layer, key, cost)]).await.unwrap();
            states.insert((layer, key), models[layer].give_back(st, now, cost));
            continue;
        }
        let got = s.take(&[ch(layer, key, cost)], 0).await.unwrap();
        let want = match models[layer].take(st, now, cost) {
            (Take::Granted, next) => {
                states.insert((layer, key), next);
                Decision::Granted
            }
            (Take::NotYet { wait }, _) => Decision::Refused {
                charge: 0,
                retry_after: wait * unit,
            },
            (Take::OverCapacity, _) => unreachable!("cost ≤ capacity"),
        };
        assert_eq!(
            got, want,
            "step {step}: layer {layer} key {key} cost {cost}"
        );
        let st = states.get(&(layer, key)).copied().unwrap_or_default();
        let peek = s.peek(layer, key).await.unwrap();
        assert_eq!(
            peek.remaining,
            models[layer].remaining(st, now),
            "step {step}"
        );
    }
}

impl Fixture {
    fn clock_now(&self) -> Nanos {
        use mailsluice::clock::Clock;
        self.clock.now()
    }
}
