//! Unit tests of the bucket math (kept in their own file so `bucket/mod.rs` stays short).

use super::*;

const MS: Nanos = 1_000_000;
const SEC: Nanos = 1_000 * MS;

/// Whether the bucket is indistinguishable from a fresh one at `now` (see `full_at`).
fn is_full(b: &Bucket, st: State, now: Nanos) -> bool {
    b.full_at(st) <= now
}

fn granted(b: &Bucket, st: State, now: Nanos, cost: u64) -> State {
    match b.take(st, now, cost) {
        (Take::Granted, next) => next,
        other => panic!("expected a grant at {now}, got {other:?}"),
    }
}

fn wait_of(b: &Bucket, st: State, now: Nanos, cost: u64) -> Nanos {
    match b.take(st, now, cost) {
        (Take::NotYet { wait }, next) => {
            assert_eq!(next, st, "a refusal changes nothing");
            wait
        }
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[test]
fn drip_starts_full_then_refills_gradually() {
    let b = Bucket::drip(10, 10, SEC);
    let mut st = State::default();
    assert_eq!(b.remaining(st, 0), 10);
    st = granted(&b, st, 0, 10);
    assert_eq!(b.remaining(st, 0), 0);
    assert_eq!(wait_of(&b, st, 0, 1), 100 * MS);
    assert_eq!(b.remaining(st, 100 * MS - 1), 0);
    assert_eq!(b.remaining(st, 100 * MS), 1);
    assert_eq!(b.remaining(st, 550 * MS), 5);
    assert_eq!(b.remaining(st, 5 * SEC), 10, "never above burst");
    assert!(!is_full(&b, st, SEC - 1));
    assert!(is_full(&b, st, SEC));
    assert_eq!(b.full_at(st), SEC);
}

#[test]
fn drip_burst_above_limit_holds_more_than_one_interval() {
    let b = Bucket::drip(30, 10, SEC);
    let st = granted(&b, State::default(), 0, 30);
    assert_eq!(wait_of(&b, st, 0, 20), 2 * SEC);
    assert_eq!(b.full_at(st), 3 * SEC);
}

#[test]
fn drip_wait_is_exact_with_a_rate_that_does_not_divide() {
    // 3 tokens every 1 s: one token every 333_333_333.33 ns.
    let b = Bucket::drip(3, 3, SEC);
    let st = granted(&b, State::default(), 0, 3);
    assert_eq!(wait_of(&b, st, 0, 1), 333_333_334);
    assert_eq!(wait_of(&b, st, 0, 2), 666_666_667);
    assert_eq!(wait_of(&b, st, 0, 3), SEC);
    let st = granted(&b, st, 333_333_334, 1);
    let st = granted(&b, st, 666_666_667, 1);
    let st = granted(&b, st, SEC, 1);
    assert_eq!(b.remaining(st, SEC), 0);
}

#[test]
fn drip_does_not_drift_over_a_year_of_single_takes() {
    // 7 tokens per 3 minutes (one every 25.714285714... s), taken one at a time at the earliest
    // instant for a year: the n-th is granted at exactly ⌈n × 3 min / 7⌉, nothing lost.
    let period = 180 * SEC;
    let b = Bucket::drip(2, 7, period);
    let mut st = granted(&b, State::default(), 0, 2);
    let takes: u64 = 7 * 175_200; // a year of 3-minute periods
    let mut at = 0;
    for _ in 0..takes {
        let (t, next) = b.reserve(st, at, 1).unwrap();
        (at, st) = (t, next);
    }
    let ideal = (u128::from(takes) * u128::from(period)).div_ceil(7) as u64;
    assert_eq!(at, ideal);
}

#[test]
fn drip_clips_at_burst_so_a_late_take_wastes_only_the_overflow() {
    // Burst 1: the bucket is full at 333_333_333.3 ns; taking at the next whole nanosecond
    // starts the next token from then (a full bucket gains nothing).
    let b = Bucket::drip(1, 3, SEC);
    let st = granted(&b, State::default(), 0, 1);
    let st = granted(&b, st, 333_333_334, 1);
    assert_eq!(wait_of(&b, st, 333_333_334, 1), 333_333_334);
}

#[test]
fn drip_give_back_is_capped_at_burst() {
    let b = Bucket::drip(10, 10, SEC);
    let st = granted(&b, State::default(), 0, 4);
    let st = b.give_back(st, 0, 100);
    assert_eq!(b.remaining(st, 0), 10);
    assert!(is_full(&b, st, 0));
    let st = granted(&b, st, 0, 10);
    assert_eq!(b.remaining(b.give_back(st, 0, 3), 0), 3);
}

#[test]
fn cost_above_capacity_is_permanent_in_every_mode() {
    for b in [
        Bucket::drip(5, 1, SEC),
        Bucket::fixed_window(5, SEC),
        Bucket::lifetime(5, SEC),
    ] {
        assert_eq!(b.take(State::default(), 0, 6).0, Take::OverCapacity);
        assert_eq!(b.earliest(State::default(), 0, 6), None);
        assert_eq!(b.take(State::default(), 0, 5).0, Take::Granted);
    }
}

#[test]
fn zero_cost_is_granted_and_changes_nothing() {
    for b in [
        Bucket::drip(1, 1, SEC),
        Bucket::fixed_window(1, SEC),
        Bucket::lifetime(1, SEC),
    ] {
        let st = granted(&b, State::default(), 0, 1);
        assert_eq!(b.take(st, 0, 0), (Take::Granted, st));
    }
}

#[test]
fn fixed_window_resets_exactly_interval_after_first_take() {
    let b = Bucket::fixed_window(3, 10 * SEC);
    let st = granted(&b, State::default(), 2 * SEC, 1);
    assert_eq!(b.reset_at(st, 2 * SEC), Some(12 * SEC));
    // Later takes do not extend the window.
    let st = granted(&b, st, 5 * SEC, 1);
    let st = granted(&b, st, 9 * SEC, 1);
    assert_eq!(b.reset_at(st, 9 * SEC), Some(12 * SEC));
    assert_eq!(b.remaining(st, 9 * SEC), 0);
    assert_eq!(wait_of(&b, st, 9 * SEC, 1), 3 * SEC);
    assert_eq!(wait_of(&b, st, 12 * SEC - 1, 3), 1);
    // Exactly at first take + interval it is full again; no gradual refill before.
    assert_eq!(b.remaining(st, 12 * SEC - 1), 0);
    assert_eq!(b.remaining(st, 12 * SEC), 3);
    assert_eq!(b.reset_at(st, 12 * SEC), None);
    // The next window starts at its own first take, not at the old reset.
    let st = granted(&b, st, 20 * SEC, 2);
    assert_eq!(b.reset_at(st, 20 * SEC), Some(30 * SEC));
}

#[test]
fn fixed_window_full_only_after_window_ends() {
    let b = Bucket::fixed_window(3, SEC);
    let st = granted(&b, State::default(), 0, 1);
    let st = b.give_back(st, 0, 1);
    assert_eq!(b.remaining(st, 0), 3);
    assert!(!is_full(&b, st, 0), "the window's anchor still matters");
    assert!(is_full(&b, st, SEC));
    assert!(is_full(&b, State::default(), 0));
}

#[test]
fn lifetime_cap_never_refills_while_active() {
    let b = Bucket::lifetime(2, 60 * SEC);
    let st = granted(&b, State::default(), 0, 1);
    let st = granted(&b, st, 30 * SEC, 1);
    assert_eq!(b.remaining(st, 80 * SEC), 0, "no refill with time");
    assert_eq!(b.reset_at(st, 80 * SEC), None);
    // Forgotten idle_ttl after the last take, not the first.
    assert_eq!(wait_of(&b, st, 80 * SEC, 1), 10 * SEC);
    assert!(!is_full(&b, st, 90 * SEC - 1));
    assert!(is_full(&b, st, 90 * SEC));
    assert_eq!(b.remaining(st, 90 * SEC), 2);
}

#[test]
fn lifetime_cap_expires_after_idle_ttl_and_starts_full() {
    let b = Bucket::lifetime(3, 100 * SEC);
    let st = granted(&b, State::default(), 0, 3);
    assert_eq!(b.remaining(st, 100 * SEC - 1), 0);
    let st = granted(&b, st, 100 * SEC, 3);
    assert_eq!(b.full_at(st), 200 * SEC);
}

#[test]
fn lifetime_give_back_returns_tokens_without_extending_ttl() {
    let b = Bucket::lifetime(3, 100 * SEC);
    let st = granted(&b, State::default(), 0, 2);
    let st = b.give_back(st, 50 * SEC, 5);
    assert_eq!(b.remaining(st, 50 * SEC), 3);
    assert!(
        is_full(&b, st, 50 * SEC),
        "all given back: like a fresh key"
    );
}

#[test]
fn reserve_folds_a_queue_in_order() {
    let b = Bucket::drip(4, 4, SEC);
    let st = granted(&b, State::default(), 0, 4);
    let (t1, st) = b.reserve(st, 0, 3).unwrap();
    let (t2, _) = b.reserve(st, t1, 1).unwrap();
    assert_eq!((t1, t2), (750 * MS, SEC));
    let w = Bucket::fixed_window(10, SEC);
    let st = granted(&w, State::default(), 0, 10);
    let mut at = Vec::new();
    let (mut cur, mut now) = (st, 0);
    for cost in [6, 6, 6] {
        // Each waiter is granted no earlier than the one ahead of it: fold with that time.
        let (t, next) = w.reserve(cur, now, cost).unwrap();
        at.push(t);
        (cur, now) = (next, t);
    }
    assert_eq!(
        at,
        vec![SEC, 2 * SEC, 3 * SEC],
        "a window's leftover is not pooled"
    );
}

#[test]
fn a_converted_drip_keeps_its_tokens_and_refills_at_the_new_limit() {
    let s = 1_000_000_000;
    let fast = Bucket::drip(20, 20, s);
    let slow = Bucket::drip(20, 10, s);
    let mut st = State::default();
    for _ in 0..15 {
        st = fast.take(st, 0, 1).1;
    }
    assert_eq!(fast.remaining(st, 0), 5);
    let st = slow.converted(&fast, st, 0);
    assert_eq!(slow.remaining(st, 0), 5);
    assert_eq!(slow.remaining(st, s), 15);
    assert_eq!(
        slow.take(slow.take(st, 0, 5).1, 0, 1).0,
        Take::NotYet { wait: s / 10 }
    );
    // A full bucket stays full.
    assert_eq!(
        slow.remaining(slow.converted(&fast, State::default(), 7 * s), 7 * s),
        20
    );
}

#[test]
fn a_learned_burst_drops_the_tokens_above_it_and_a_larger_cost_takes_it_all() {
    let fast = Bucket::drip(20, 20, SEC);
    let slow = Bucket::drip(20, 5, SEC).learned(5);
    let mut st = State::default();
    for _ in 0..3 {
        st = fast.take(st, 0, 1).1;
    }
    // 17 held: only 5 are kept; the 3 taken are not charged again.
    let st = slow.converted(&fast, st, 0);
    assert_eq!(slow.remaining(st, 0), 5);
    // A cost of 12 (under the configured burst of 20) takes the whole learned burst of 5.
    let (taken, next) = slow.take(st, 0, 12);
    assert_eq!((taken, slow.remaining(next, 0)), (Take::Granted, 0));
    assert_eq!(slow.take(next, 0, 12).0, Take::NotYet { wait: SEC });
    // 2 held of 20 stay 2 at the learned burst of 5.
    let mut st = State::default();
    for _ in 0..18 {
        st = fast.take(st, 0, 1).1;
    }
    assert_eq!(slow.remaining(slow.converted(&fast, st, 0), 0), 2);
}
