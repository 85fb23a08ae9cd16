//! The checker's own test: each rule on hand-made records.

use std::time::Duration;

use tokio::time::Instant;

use super::*;

/// The checker on hand-made records: each rule catches what it should.
pub fn self_test() {
    let t0 = Instant::now();
    let s = |ms: u64| t0 + Duration::from_millis(ms);
    let phases = vec![Phase {
        name: "p".into(),
        start: t0,
        healed: t0,
        end: s(10_000),
    }];
    let at = |id: &str, seen: Seen| Attempt {
        id: id.into(),
        phase: 0,
        seen,
        at: t0,
    };
    let ok = || Seen::Reply(250, "2.0.0 ok".into());
    let unsure = || Seen::Reply(451, "4.4.1 ... it may have been delivered".into());
    let later = || Seen::Reply(451, "4.7.1 later".into());
    let attempts = vec![
        at("a", ok()),
        at("b", later()),
        at("b", ok()),
        at("c", unsure()),
        at("c", ok()),
        at("d", Seen::NoReply),
        at("e", later()),
    ];
    let shared = Shared { limit: 2, burst: 1 };
    let up = |ids: &[(&str, u64)]| -> Vec<(Option<String>, Instant)> {
        ids.iter()
            .map(|(i, ms)| (Some(i.to_string()), s(*ms)))
            .collect()
    };
    // c twice (its retry after "may have been delivered"), d once without a reply.
    let good = up(&[("a", 0), ("b", 10), ("c", 20), ("c", 3000), ("d", 3010)]);
    let r = check(&phases, &attempts, &good, &["e".into()], shared);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let row = &r.rows[0];
    assert_eq!((row.offered, row.delivered, row.refused_4xx), (5, 4, 2));
    assert_eq!(
        (row.uncertain, row.uncertain_held, row.retry_copies),
        (1, 0, 1)
    );
    assert_eq!((row.cut, row.cut_held, row.unfinished), (1, 1, 1));
    // Four arrivals within 1 s against limit + burst = 3: one too many.
    assert_eq!(row.worst_excess, 0);
    let r = check(
        &phases,
        &attempts,
        &up(&[("a", 0), ("b", 1), ("c", 2), ("d", 3)]),
        &[],
        shared,
    );
    assert_eq!(r.rows[0].worst_excess, 1);
    assert_eq!(r.rows[0].recovered_in, Some(Duration::from_millis(1)));
    // Lost: b answered 250, not upstream.
    let r = check(
        &phases,
        &attempts,
        &up(&[("a", 0), ("c", 1), ("d", 2)]),
        &[],
        shared,
    );
    assert_eq!(r.rows[0].lost, 1, "{:?}", r.violations);
    // Duplicated: a twice with one 250; e refused yet delivered; c three times.
    for bad in [
        up(&[("a", 0), ("a", 1), ("b", 2), ("c", 3)]),
        up(&[("a", 0), ("b", 2), ("c", 3), ("e", 4)]),
        up(&[("a", 0), ("b", 2), ("c", 3), ("c", 4), ("c", 5)]),
    ] {
        let r = check(&phases, &attempts, &bad, &[], shared);
        assert_eq!(r.rows[0].duplicated, 1, "{:?}", r.violations);
        assert!(!r.violations.is_empty());
    }
    // Unknown to every client, or without an id.
    let mut unknown = good.clone();
    unknown.push((Some("zzz".into()), s(5)));
    assert!(!check(&phases, &attempts, &unknown, &[], shared)
        .violations
        .is_empty());
    let mut anonymous = good;
    anonymous.push((None, s(5)));
    assert!(!check(&phases, &attempts, &anonymous, &[], shared)
        .violations
        .is_empty());
    memory_self_test();
    failover_self_test();
}

/// A failover's figures on hand-made records.
fn failover_self_test() {
    let t0 = Instant::now();
    let s = |ms: u64| t0 + Duration::from_millis(ms);
    let times = FailoverTimes {
        killed: s(1000),
        detected: s(2000),
        promoted: s(2100),
    };
    let at = |ms: u64, seen: Seen| Attempt {
        id: "x".into(),
        phase: 0,
        seen,
        at: s(ms),
    };
    let later = || Seen::Reply(451, "4.7.1 later".into());
    let unsure = || Seen::Reply(451, "4.4.1 ... it may have been delivered".into());
    let attempts = [
        at(900, later()),
        at(1500, later()),
        at(2500, unsure()),
        at(2900, Seen::NoReply),
        at(3500, later()),
    ];
    // The gap after 3100 is a later fault's, not the failover's.
    let upstream: Vec<(Option<String>, Instant)> = [500, 1100, 3000, 3100, 9000]
        .iter()
        .map(|ms| (Some("x".into()), s(*ms)))
        .collect();
    let f = failover_cost(times, &attempts, &upstream);
    assert_eq!(
        f,
        Failover {
            detected_in: Duration::from_millis(1000),
            promoted_in: Duration::from_millis(1100),
            no_delivery: Duration::from_millis(1900),
            refused_4xx: 1,
            uncertain: 1,
            cut: 1,
        }
    );
}

/// The memory rules on hand-made samples.
fn memory_self_test() {
    let bound = MemoryBound {
        peak_kib: 1000,
        growth_kib: 100,
    };
    let life = |kib: &[u64]| -> Vec<RssSample> {
        kib.iter()
            .map(|&kib| RssSample {
                phase: 0,
                relay: 0,
                life: 1,
                kib,
            })
            .collect()
    };
    let report = || Report {
        rows: vec![Row::default()],
        ..Report::default()
    };
    let flat = life(&[500; 12]);
    let mut r = report();
    check_memory(&mut r, &flat, bound);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.rows[0].peak_rss_kib, 500);
    assert_eq!((r.lives[0].first_kib, r.lives[0].last_kib), (500, 500));
    // Above the peak bound once.
    let mut r = report();
    check_memory(&mut r, &life(&[500, 1001, 500]), bound);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    // Growing by 101 KiB over 12 samples; the same over 11 samples is too short to judge.
    let growing: Vec<u64> = (0..12).map(|i| if i < 4 { 500 } else { 601 }).collect();
    let mut r = report();
    check_memory(&mut r, &life(&growing), bound);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    let mut r = report();
    check_memory(&mut r, &life(&growing[1..]), bound);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}
