//! The ledger's window, counts and verdicts, on a fake `now`.

use super::*;

const HOUR: Nanos = 3_600_000_000_000;

fn ledger() -> Ledger {
    let limits = Limits {
        max_bounce_rate: 0.05,
        max_complaint_rate: 0.001,
        min_messages: 20,
        min_bounces: 1,
        min_complaints: 1,
        window: Duration::from_secs(24 * 3600),
    };
    Ledger::new(limits, 3)
}

fn sent(n: u64) -> Counts {
    Counts {
        sent: n,
        ..Counts::default()
    }
}
fn bounces(n: u64) -> Counts {
    Counts {
        bounces: n,
        ..Counts::default()
    }
}

#[test]
fn over_the_bounce_rate_with_enough_messages_pauses() {
    let mut l = ledger();
    l.add("acme", sent(40), 0);
    l.add("acme", bounces(2), HOUR);
    assert_eq!(
        l.verdict("acme", HOUR),
        (None, Change::None),
        "5 % is not past 5 %"
    );
    l.add("acme", bounces(4), HOUR);
    let (breach, change) = l.verdict("acme", HOUR);
    let b = breach.unwrap();
    assert_eq!((b.kind, b.sent, change), (Kind::Bounce, 40, Change::Paused));
    assert!((b.rate - 0.15).abs() < 1e-9);
    assert_eq!(
        l.verdict("acme", HOUR).1,
        Change::None,
        "one change, logged once"
    );
    assert_eq!(l.verdict("other", HOUR), (None, Change::None));
}

#[test]
fn no_verdict_under_min_messages() {
    let mut l = ledger();
    l.add("small", sent(19), 0);
    l.add("small", bounces(19), 0);
    assert_eq!(l.verdict("small", 0).0, None);
    l.add("small", sent(1), 0);
    assert_eq!(l.verdict("small", 0).0.unwrap().kind, Kind::Bounce);
}

/// Past the rate, still no verdict under the minimum count of its kind.
#[test]
fn no_verdict_under_min_bounces_or_min_complaints() {
    let limits = Limits {
        min_bounces: 3,
        min_complaints: 2,
        ..ledger().limits
    };
    let counts = |bounces, complaints| Counts {
        sent: 20,
        bounces,
        complaints,
    };
    assert_eq!(breach(limits, counts(2, 1)), None, "10 % and 5 %, too few");
    assert_eq!(breach(limits, counts(3, 0)).unwrap().kind, Kind::Bounce);
    assert_eq!(breach(limits, counts(0, 2)).unwrap().kind, Kind::Complaint);
    assert_eq!(breach(limits, counts(2, 2)).unwrap().kind, Kind::Complaint);
}

#[test]
fn complaints_count_on_their_own_rate() {
    let mut l = ledger();
    l.add("t", sent(1000), 0);
    l.add(
        "t",
        Counts {
            complaints: 1,
            ..Counts::default()
        },
        0,
    );
    assert_eq!(l.verdict("t", 0).0, None, "0.1 % is not past 0.1 %");
    l.add(
        "t",
        Counts {
            complaints: 1,
            ..Counts::default()
        },
        0,
    );
    assert_eq!(l.verdict("t", 0).0.unwrap().kind, Kind::Complaint);
}

#[test]
fn the_window_slides_and_the_tenant_goes_again() {
    let mut l = ledger();
    l.add("acme", sent(40), 0);
    l.add("acme", bounces(6), 0);
    l.add("acme", sent(40), 12 * HOUR);
    assert!(l.verdict("acme", 12 * HOUR).0.is_some(), "6 of 80");
    // The first slot leaves the window 24 h after it began: 0 bounces of 40.
    assert!(l.verdict("acme", 24 * HOUR - 1).0.is_some());
    assert_eq!(l.verdict("acme", 24 * HOUR), (None, Change::Resumed));
    assert_eq!(l.totals("acme", 24 * HOUR), sent(40));
    assert_eq!(l.totals("acme", 36 * HOUR), Counts::default());
}

#[test]
fn a_resume_starts_the_window_afresh() {
    let mut l = ledger();
    l.add("acme", sent(40), 0);
    l.add("acme", bounces(40), 0);
    assert!(l.verdict("acme", 0).0.is_some());
    assert!(l.resume("acme"));
    assert!(!l.resume("acme"));
    assert_eq!(l.verdict("acme", 0).0, None);
}

#[test]
fn at_max_tenants_the_least_recently_used_goes() {
    let mut l = ledger();
    for (i, k) in ["a", "b", "c"].iter().enumerate() {
        l.add(k, sent(1), i as u64);
    }
    l.add("a", sent(1), 10);
    l.add("d", sent(1), 11);
    assert_eq!(l.len(), 3);
    assert_eq!(l.totals("b", 11), Counts::default(), "b was idle longest");
    assert_eq!(l.totals("a", 11), sent(2));
    let keys: Vec<_> = l
        .snapshot(11)
        .into_iter()
        .map(|(k, ..)| k.to_string())
        .collect();
    assert_eq!(keys, ["a", "c", "d"]);
}
