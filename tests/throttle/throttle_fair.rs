//! Fair share (`fair_by`) on tokio's paused clock: the waiters of one bucket served in turn by
//! fair key (by cost, with weights), within the bucket's unchanged rate and bounds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::throttle::*;
use mailsluice::throttle::LayerSpec;
use tokio::task::JoinHandle;

/// Grants in order: (fair key, its message number, instant, cost).
type Log = Arc<Mutex<Vec<(String, usize, Duration, u64)>>>;

/// An account-wide layer, `limit` per second (burst = limit), fair by tenant when `fair`.
fn account(limit: u64, fair: bool) -> LayerSpec {
    let mut spec = per_sec("account", limit);
    spec.fair = fair;
    spec.max_wait = Duration::from_secs(1_000);
    spec
}

/// Queues `n` messages of `tenant` (cost each) on the account layer, each in a task that logs
/// its grant; they arrive in number order.
async fn flood(e: &Env, log: &Log, tenant: &str, n: usize, cost: u64) -> Vec<JoinHandle<()>> {
    let mut handles = Vec::new();
    for i in 0..n {
        let (t, clock, log) = (e.t.clone(), e.clock.clone(), log.clone());
        let c = fair_charge(0, "", tenant, cost);
        let tenant = tenant.to_string();
        handles.push(tokio::spawn(async move {
            let p = t.acquire(vec![c]).await.expect("granted");
            let at = Duration::from_nanos(mailsluice::clock::Clock::now(&*clock));
            log.lock().unwrap().push((tenant, i, at, cost));
            p.delivered();
        }));
        settle().await;
    }
    handles
}

async fn join(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        h.await.unwrap();
    }
}

/// Over every window [t_i, t_j] of the grants, tokens never exceed `burst + limit * t / 1 s`.
fn assert_within_bound(log: &Log, burst: u64, limit: u64) {
    let log = log.lock().unwrap();
    for i in 0..log.len() {
        let mut tokens = 0;
        for j in i..log.len() {
            tokens += log[j].3;
            let span = (log[j].2 - log[i].2).as_nanos();
            let allowed = burst as u128 * 1_000_000_000 + limit as u128 * span;
            assert!(
                tokens as u128 * 1_000_000_000 <= allowed,
                "over the bound at {j}"
            );
        }
    }
}

/// Each tenant's grants came in its arrival order.
fn assert_fifo_per_tenant(log: &Log) {
    let log = log.lock().unwrap();
    let mut last: std::collections::HashMap<&str, usize> = Default::default();
    for (tenant, i, _, _) in log.iter() {
        if let Some(prev) = last.insert(tenant, *i) {
            assert!(*i > prev, "{tenant}: {i} after {prev}");
        }
    }
}

fn granted_at(log: &Log, tenant: &str) -> Vec<Duration> {
    let log = log.lock().unwrap();
    (log.iter().filter(|g| g.0 == tenant))
        .map(|g| g.2)
        .collect()
}

/// A's 100 queued, B's one message 0.5 s later: when B is granted.
async fn backlog_then_newcomer(fair: bool) -> (Log, Duration) {
    let e = Env::new(vec![account(5, fair)]);
    let log = Log::default();
    let a = flood(&e, &log, "a", 100, 1).await;
    tokio::time::sleep(ms(500)).await;
    let b = flood(&e, &log, "b", 1, 1).await;
    join(b).await;
    let b_at = granted_at(&log, "b")[0];
    join(a).await;
    (log, b_at - ms(500))
}

#[tokio::test(start_paused = true)]
async fn a_newcomer_waits_one_turn_behind_another_tenants_backlog() {
    let (log, waited) = backlog_then_newcomer(true).await;
    assert!(waited <= ms(400), "B waited {waited:?}");
    assert_fifo_per_tenant(&log);
    assert_within_bound(&log, 5, 5);
    assert_eq!(log.lock().unwrap().len(), 101);
}

#[tokio::test(start_paused = true)]
async fn without_fair_by_the_newcomer_waits_behind_the_whole_backlog() {
    let (log, waited) = backlog_then_newcomer(false).await;
    // Today's FIFO: 95 queued at 0.2 s each, less the 0.5 s already served.
    assert!(waited >= ms(18_000), "B waited {waited:?}");
    assert_fifo_per_tenant(&log);
    assert_within_bound(&log, 5, 5);
}

#[tokio::test(start_paused = true)]
async fn three_backlogs_share_the_rate_then_one_gets_it_all() {
    let e = Env::new(vec![account(5, true)]);
    let log = Log::default();
    let mut all = flood(&e, &log, "a", 50, 1).await;
    all.extend(flood(&e, &log, "b", 20, 1).await);
    all.extend(flood(&e, &log, "c", 5, 1).await);
    join(all).await;
    let (a, b, c) = (
        granted_at(&log, "a"),
        granted_at(&log, "b"),
        granted_at(&log, "c"),
    );
    // While all three wait (A's first 5 went at once, before anyone queued): a third each.
    let c_done = *c.last().unwrap();
    let served = |t: &[Duration]| t.iter().filter(|&&x| x > ms(0) && x <= c_done).count();
    let (sa, sb, sc) = (served(&a), served(&b), served(&c));
    assert_eq!(sc, 5);
    assert!(
        sa.abs_diff(sc) <= 1 && sb.abs_diff(sc) <= 1,
        "{sa} {sb} {sc}"
    );
    // Once alone, A gets the full rate: 70 queued tokens at 5/s end at 14 s.
    let last = *a.last().unwrap();
    assert!(
        last <= ms(14_000) + ms(140),
        "utilization under 99 %: {last:?}"
    );
    let b_done = *b.last().unwrap();
    let alone: Vec<_> = a.iter().filter(|&&t| t > b_done).collect();
    for w in alone.windows(2) {
        assert_eq!(*w[1] - *w[0], ms(200));
    }
    assert_fifo_per_tenant(&log);
    assert_within_bound(&log, 5, 5);
}

#[tokio::test(start_paused = true)]
async fn ten_recipient_messages_get_the_same_recipients_per_second() {
    let e = Env::new(vec![account(10, true)]);
    let log = Log::default();
    let mut all = flood(&e, &log, "big", 20, 10).await;
    all.extend(flood(&e, &log, "small", 200, 1).await);
    join(all).await;
    let log2 = log.lock().unwrap().clone();
    let tokens = |who: &str| -> u64 {
        (log2
            .iter()
            .filter(|g| g.0 == who && g.2 <= ms(10_000) && g.2 > ms(0)))
        .map(|g| g.3)
        .sum()
    };
    let (big, small) = (tokens("big"), tokens("small"));
    assert!(big.abs_diff(small) <= 10, "big {big} small {small}");
    assert_fifo_per_tenant(&log);
    assert_within_bound(&log, 10, 10);
}

#[tokio::test(start_paused = true)]
async fn weights_three_to_one_share_three_to_one() {
    let mut spec = account(5, true);
    spec.weights.insert("acme".into(), 3);
    let e = Env::new(vec![spec]);
    let log = Log::default();
    let mut all = flood(&e, &log, "acme", 100, 1).await;
    all.extend(flood(&e, &log, "other", 100, 1).await);
    join(all).await;
    let count = |who: &str| {
        let t = granted_at(&log, who);
        t.iter().filter(|&&x| x > ms(0) && x <= ms(20_000)).count()
    };
    let (acme, other) = (count("acme"), count("other"));
    assert_eq!(acme + other, 100);
    assert!((73..=77).contains(&acme), "acme {acme} other {other}");
    assert_fifo_per_tenant(&log);
    assert_within_bound(&log, 5, 5);
}

/// `max_wait` 5 s: A's backlog past 5 s is refused at arrival with a truthful hint, and B's
/// estimate and wait are one turn (without `fair_by`, the whole backlog).
#[tokio::test(start_paused = true)]
async fn estimates_count_turns_not_the_whole_backlog() {
    for fair in [true, false] {
        let mut spec = account(5, fair);
        spec.max_wait = Duration::from_secs(5);
        let e = Env::new(vec![spec]);
        let (mut refused, mut queued, mut at_once) = (Vec::new(), Vec::new(), 0);
        for _ in 0..40 {
            let h = e.spawn(vec![fair_charge(0, "", "a", 1)]).await;
            if !h.is_finished() {
                queued.push(h);
            } else if let Err(r) = h.await.unwrap() {
                refused.push(limited_after(Err::<(), _>(r)).1);
            } else {
                at_once += 1;
            }
        }
        assert_eq!((at_once, queued.len()), (5, 25), "5 at once, 25 within 5 s");
        assert!(refused.iter().all(|&r| r > ms(5_000) && r <= ms(5_200)));
        tokio::time::sleep(ms(500)).await;
        let b = e.spawn(vec![fair_charge(0, "", "b", 1)]).await;
        let at = b.await.unwrap().expect("B queued");
        match fair {
            true => assert!(at <= ms(900), "B at {at:?}"),
            // The measurement: 4.7 s behind A's backlog.
            false => assert_eq!(at, ms(5_200)),
        }
    }
}

/// `max_queue` bounds the waiters of the bucket over all fair keys (and so the fair keys, each
/// holding at least one waiter): past it anyone is refused, whoever holds the queue.
#[tokio::test(start_paused = true)]
async fn max_queue_bounds_all_waiters_and_fair_keys() {
    let mut spec = account(1, true);
    spec.max_queue = 3;
    let e = Env::new(vec![spec]);
    e.spend(0, "", 1).await;
    let mut waiting = Vec::new();
    for tenant in ["a", "b", "c"] {
        waiting.push(e.spawn(vec![fair_charge(0, "", tenant, 1)]).await);
    }
    assert_eq!(e.t.waiting(0), 3);
    let d = e.spawn(vec![fair_charge(0, "", "d", 1)]).await;
    let (layer, hint) = limited_after(d.await.unwrap());
    // The hint is its estimate: after the three waiters, at 1/s.
    assert_eq!((layer.as_str(), hint), ("account", Duration::from_secs(4)));
    let a2 = e.spawn(vec![fair_charge(0, "", "a", 1)]).await;
    assert!(limited_after(a2.await.unwrap()).1 > Duration::ZERO);
    for h in waiting {
        h.await.unwrap().unwrap();
    }
}
