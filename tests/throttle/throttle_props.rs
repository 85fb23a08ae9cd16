//! Properties over random configs, arrival patterns and costs, each run on a fresh
//! current-thread runtime with paused time (exact, no sleeping).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::throttle::*;
use mailsluice::clock::Clock;
use mailsluice::throttle::{LayerSpec, Mode, Refill};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// A grant: (key, arrival index, cost, instant in ns).
type Grant = (u8, usize, u64, u64);

#[derive(Debug, Clone)]
struct Arrival {
    gap_ms: u64,
    key: u8,
    cost: u64,
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(f)
}

/// Feeds the arrivals to one layer; `check` runs after each arrival has reached its queue.
/// Returns the grants in the order they were made.
fn simulate(spec: LayerSpec, arrivals: &[Arrival], check: impl Fn(&Env)) -> Vec<Grant> {
    run(async move {
        let e = Env::new(vec![spec]);
        let log: Arc<Mutex<Vec<Grant>>> = Arc::default();
        let mut tasks = Vec::new();
        for (i, a) in arrivals.iter().enumerate() {
            tokio::time::sleep(ms(a.gap_ms)).await;
            let (t, clock, log) = (e.t.clone(), e.clock.clone(), log.clone());
            let (key, cost) = (a.key, a.cost);
            tasks.push(tokio::spawn(async move {
                if let Ok(p) = t.acquire(vec![charge(0, &key.to_string(), cost)]).await {
                    log.lock().unwrap().push((key, i, cost, clock.now()));
                    p.delivered();
                }
            }));
            settle().await;
            check(&e);
        }
        for t in tasks {
            t.await.unwrap();
        }
        check(&e);
        let grants = log.lock().unwrap().clone();
        grants
    })
}

fn arrivals(max_cost: u64, keys: u8, max_gap_ms: u64) -> impl Strategy<Value = Vec<Arrival>> {
    let one = (0..=max_gap_ms, 0..keys, 1..=max_cost).prop_map(|(gap_ms, key, cost)| Arrival {
        gap_ms,
        key,
        cost,
    });
    prop::collection::vec(one, 1..40)
}

fn drip_case() -> impl Strategy<Value = (LayerSpec, Vec<Arrival>)> {
    (
        1u64..=20,
        50u64..=3000,
        1u64..=40,
        any::<bool>(),
        0u64..=4000,
        0usize..=8,
    )
        .prop_flat_map(|(limit, interval_ms, burst, reject, wait_ms, max_queue)| {
            let mut s = LayerSpec::new("p", limit, ms(interval_ms));
            s.burst = burst;
            s.mode = if reject { Mode::Reject } else { Mode::Wait };
            s.max_wait = ms(wait_ms);
            s.max_queue = max_queue;
            (Just(s), arrivals(burst, 3, 300))
        })
}

fn grants_of(grants: &[Grant], key: u8) -> Vec<Grant> {
    grants.iter().filter(|g| g.0 == key).copied().collect()
}

proptest! {
    // The stored cases are in `throttle_props.proptest-regressions`, next to this file (the
    // default would look under `tests/proptest-regressions/`, this area having a `main.rs`).
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    /// Over every window [t_i, t_j] of grants of one key: tokens ≤ burst + limit·t/interval.
    #[test]
    fn drip_never_grants_more_than_burst_plus_rate((spec, arr) in drip_case()) {
        let grants = simulate(spec.clone(), &arr, |_| {});
        let (b, l, iv) = (spec.burst as u128, spec.limit as u128, spec.interval.as_nanos());
        for key in 0..3 {
            let g = grants_of(&grants, key);
            for i in 0..g.len() {
                let mut sum = 0u128;
                for gj in &g[i..] {
                    sum += gj.2 as u128;
                    let t = (gj.3 - g[i].3) as u128;
                    prop_assert!(sum * iv <= b * iv + l * t, "{sum} tokens in {t} ns: {g:?}");
                }
            }
        }
    }

    /// Waiters of one key are granted in arrival order.
    #[test]
    fn waiters_of_one_key_are_granted_in_arrival_order((mut spec, arr) in drip_case()) {
        spec.mode = Mode::Wait;
        let grants = simulate(spec, &arr, |_| {});
        for key in 0..3 {
            let order: Vec<usize> = grants_of(&grants, key).iter().map(|g| g.1).collect();
            prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        }
    }

    /// A fixed window grants at most `limit` from its first take until first take + interval.
    #[test]
    fn fixed_window_grants_at_most_limit_per_window(
        (spec, arr) in (1u64..=10, 100u64..=2000, any::<bool>()).prop_flat_map(|(l, iv, rej)| {
            let mut s = LayerSpec::new("w", l, ms(iv));
            s.refill = Refill::FixedWindow;
            s.mode = if rej { Mode::Reject } else { Mode::Wait };
            s.max_wait = ms(3 * iv);
            (Just(s), arrivals(l, 2, 400))
        })
    ) {
        let grants = simulate(spec.clone(), &arr, |_| {});
        let iv = spec.interval.as_nanos() as u64;
        for key in 0..2 {
            let (mut start, mut used) = (None::<u64>, 0u64);
            for g in grants_of(&grants, key) {
                match start {
                    Some(s) if g.3 < s + iv => used += g.2,
                    _ => (start, used) = (Some(g.3), g.2),
                }
                prop_assert!(used <= spec.limit, "{used} in window from {start:?}");
            }
        }
    }

    /// Under saturation (a long queue at once), the bucket grants ≥ 99% of what it may.
    #[test]
    fn saturated_bucket_grants_at_least_99_percent(
        (spec, arr) in (1u64..=30, 1u64..=10, 0u64..=2).prop_flat_map(|(limit, secs, extra)| {
            let mut s = LayerSpec::new("s", limit, Duration::from_secs(secs));
            s.burst = limit + extra * limit;
            s.max_wait = Duration::from_secs(86_400 * 365);
            (Just(s.clone()), prop::collection::vec(1..=s.burst, 20..60))
        }).prop_map(|(s, costs)| {
            let arr: Vec<Arrival> =
                costs.into_iter().map(|cost| Arrival { gap_ms: 0, key: 0, cost }).collect();
            (s, arr)
        })
    ) {
        let grants = simulate(spec.clone(), &arr, |_| {});
        prop_assert_eq!(grants.len(), arr.len());
        let total: u128 = grants.iter().map(|g| g.2 as u128).sum();
        let last = grants.iter().map(|g| g.3).max().unwrap() as u128;
        let (b, l, iv) = (spec.burst as u128, spec.limit as u128, spec.interval.as_nanos());
        let may = b * iv + l * last; // × interval
        prop_assert!(100 * total * iv >= 99 * may, "granted {total}, may {}", may / iv);
        prop_assert!(total * iv <= may);
    }

    /// max_keys buckets and max_queue waiters per bucket are never exceeded.
    #[test]
    fn max_keys_and_max_queue_are_never_exceeded(
        (spec, arr) in (1usize..=6, 0usize..=4, 1u64..=5).prop_flat_map(|(keys, queue, limit)| {
            let mut s = LayerSpec::new("k", limit, ms(500));
            s.max_keys = keys;
            s.max_queue = queue;
            s.max_wait = Duration::from_secs(60);
            (Just(s), arrivals(limit, 10, 150))
        })
    ) {
        let (max_keys, max_queue) = (spec.max_keys, spec.max_queue);
        let seen = Arc::new(Mutex::new((0usize, 0usize)));
        let s2 = seen.clone();
        simulate(spec, &arr, move |e| {
            let keys = e.t.keys(0);
            let queue = (0..10).map(|k| e.t.peek("k", &k.to_string()).unwrap().waiting).max();
            let mut s = s2.lock().unwrap();
            s.0 = s.0.max(keys);
            s.1 = s.1.max(queue.unwrap_or(0));
        });
        let (keys, queue) = *seen.lock().unwrap();
        prop_assert!(keys <= max_keys, "{keys} keys > {max_keys}");
        prop_assert!(queue <= max_queue, "{queue} waiters > {max_queue}");
    }
}
