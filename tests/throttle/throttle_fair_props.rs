//! Fair share as properties over random arrivals of several tenants on one account bucket,
//! each run on a fresh current-thread runtime with paused time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::throttle::*;
use mailsluice::clock::Clock;
use mailsluice::throttle::LayerSpec;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// A grant: (tenant, arrival index, cost, arrival instant, grant instant), in grant order.
type Grant = (u8, usize, u64, u64, u64);

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(f)
}

/// Feeds (gap ms, tenant, cost) arrivals to one fair layer, all on its one bucket.
fn simulate(spec: LayerSpec, arrivals: &[(u64, u8, u64)]) -> Vec<Grant> {
    run(async move {
        let e = Env::new(vec![spec]);
        let log: Arc<Mutex<Vec<Grant>>> = Arc::default();
        let mut tasks = Vec::new();
        for (i, &(gap, tenant, cost)) in arrivals.iter().enumerate() {
            tokio::time::sleep(ms(gap)).await;
            let (t, clock, log) = (e.t.clone(), e.clock.clone(), log.clone());
            let arrived = clock.now();
            tasks.push(tokio::spawn(async move {
                let c = fair_charge(0, "", &tenant.to_string(), cost);
                let p = t.acquire(vec![c]).await.expect("max_wait is long");
                log.lock()
                    .unwrap()
                    .push((tenant, i, cost, arrived, clock.now()));
                p.delivered();
            }));
            settle().await;
        }
        for t in tasks {
            t.await.unwrap();
        }
        let grants = log.lock().unwrap().clone();
        grants
    })
}

fn case(max_cost: u64) -> impl Strategy<Value = (LayerSpec, Vec<(u64, u8, u64)>)> {
    (1u64..=10, 1u64..=10).prop_flat_map(move |(limit, burst)| {
        let mut s = LayerSpec::new("account", limit, Duration::from_secs(1));
        (s.burst, s.fair, s.max_wait) = (burst.max(max_cost), true, Duration::from_secs(10_000));
        let one = (0u64..=400, 0u8..4, 1..=max_cost);
        (Just(s), prop::collection::vec(one, 1..60))
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    /// Never over `burst + limit·t/interval` over the bucket, and each tenant in its order.
    #[test]
    fn fair_layers_keep_the_bound_and_each_tenants_order((spec, arr) in case(3)) {
        let g = simulate(spec.clone(), &arr);
        prop_assert_eq!(g.len(), arr.len());
        let (b, l, iv) = (spec.burst as u128, spec.limit as u128, spec.interval.as_nanos());
        let mut by_time = g.clone();
        by_time.sort_by_key(|x| x.4);
        for i in 0..by_time.len() {
            let mut sum = 0u128;
            for gj in &by_time[i..] {
                sum += gj.2 as u128;
                let t = (gj.4 - by_time[i].4) as u128;
                prop_assert!(sum * iv <= b * iv + l * t, "{sum} tokens in {t} ns");
            }
        }
        for tenant in 0..4 {
            let order: Vec<usize> = g.iter().filter(|x| x.0 == tenant).map(|x| x.1).collect();
            prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        }
    }

    /// Once a message is the head of its tenant's queue, each other tenant is granted at
    /// most two messages before it (one turn, and one whose tag ties the last one served).
    #[test]
    fn a_tenants_head_waits_at_most_a_turn_per_other_tenant((spec, arr) in case(1)) {
        let g = simulate(spec, &arr);
        for (n, m) in g.iter().enumerate() {
            let prev = g[..n].iter().rev().find(|x| x.0 == m.0).map_or(0, |x| x.4);
            let head_at = m.3.max(prev);
            // Grants after it became head; those at that very instant may have come first.
            let ahead = g[..n].iter().filter(|x| x.4 > head_at && x.0 != m.0);
            for other in 0..4u8 {
                let count = ahead.clone().filter(|x| x.0 == other).count();
                prop_assert!(count <= 2, "tenant {other} went {count} times before {m:?}");
            }
        }
    }
}
