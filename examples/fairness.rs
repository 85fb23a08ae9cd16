//! Fair share measured (a benchmark; run by `bench/fairness.sh`): one account-wide layer at
//! `LIMIT`/s, a heavy tenant keeping `HEAVY` messages waiting at all times, a light tenant
//! sending one message every `LIGHT_EVERY`, for `SECONDS`, in real time on the throttle alone
//! (no SMTP: the queueing is what is measured). Reports the light tenant's wait (p50, p99,
//! max) and the layer's utilization, with `fair_by` on and off.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mailsluice::clock::TokioClock;
use mailsluice::throttle::{Charge, LayerSpec, Throttle};

const LIMIT: u64 = 200;
const HEAVY: usize = 500;
const LIGHT_EVERY: Duration = Duration::from_millis(50);

fn charge(tenant: &str) -> Vec<Charge> {
    vec![Charge {
        layer: 0,
        key: String::new(),
        cost: 1,
        fair: tenant.to_string(),
        blame: tenant.to_string(),
    }]
}

/// Light waits (sorted, ms) and grants of the run.
async fn run(fair: bool, seconds: u64) -> (Vec<f64>, u64) {
    let mut spec = LayerSpec::new("account", LIMIT, Duration::from_secs(1));
    (spec.fair, spec.max_wait) = (fair, Duration::from_secs(60));
    let t = Arc::new(Throttle::new(vec![spec], Arc::new(TokioClock::new())));
    let (stop, grants) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let heavy: Vec<_> = (0..HEAVY)
        .map(|_| {
            let (t, stop, grants) = (t.clone(), stop.clone(), grants.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(p) = t.acquire(charge("heavy")).await {
                        grants.fetch_add(1, Ordering::Relaxed);
                        p.delivered();
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await; // the backlog builds
    let (start, mut waits) = (Instant::now(), Vec::new());
    while start.elapsed() < Duration::from_secs(seconds) {
        let (t, grants) = (t.clone(), grants.clone());
        waits.push(tokio::spawn(async move {
            let at = Instant::now();
            let p = t.acquire(charge("light")).await.expect("granted");
            grants.fetch_add(1, Ordering::Relaxed);
            p.delivered();
            at.elapsed().as_secs_f64() * 1000.0
        }));
        tokio::time::sleep(LIGHT_EVERY).await;
    }
    let mut light = Vec::new();
    for w in waits {
        light.push(w.await.unwrap());
    }
    let total = grants.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    t.dispose();
    for h in heavy {
        h.await.unwrap();
    }
    light.sort_by(f64::total_cmp);
    (light, total)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::args().nth(1).map_or(5, |s| s.parse().unwrap());
    println!("| fair_by | light messages | light p50 | light p99 | light max | utilization |");
    println!("|---|---|---|---|---|---|");
    for fair in [false, true] {
        let started = Instant::now();
        let (light, total) = run(fair, seconds).await;
        // Allowed: the burst plus the rate over the whole run (backlog build-up included).
        let allowed = LIMIT as f64 * (1.0 + started.elapsed().as_secs_f64());
        println!(
            "| {} | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} % |",
            if fair { "on" } else { "off" },
            light.len(),
            pct(&light, 0.5),
            pct(&light, 0.99),
            light[light.len() - 1],
            100.0 * total as f64 / allowed,
        );
    }
}
