//! Unit tests of the key table: eviction order, idle buckets forgotten, index consistency.

use super::*;
use crate::throttle::bucket::Take;

const SEC: Nanos = 1_000_000_000;

#[derive(Default)]
struct Flag(bool);
impl Pin for Flag {
    fn pinned(&self) -> bool {
        self.0
    }
}

/// Ten tokens, ten a second; buckets are never forgotten for being idle.
fn table(max_keys: usize) -> KeyTable<Flag> {
    KeyTable::new("t", Bucket::drip(10, 10, SEC), max_keys, Nanos::MAX)
}

/// The same, with room for a thousand keys and `idle_ttl`.
fn idle_table(idle_ttl: Nanos) -> KeyTable<Flag> {
    KeyTable::new("t", Bucket::drip(10, 10, SEC), 1_000, idle_ttl)
}

fn take(t: &mut KeyTable<Flag>, key: &str, now: Nanos, cost: u64) -> u32 {
    let id = t.find_or_insert(key, now).unwrap();
    let b = *t.bucket();
    let granted = t.modify(id, now, |st, _| {
        let (d, next) = b.take(*st, now, cost);
        *st = next;
        d == Take::Granted
    });
    assert!(granted);
    id
}

fn keys(t: &KeyTable<Flag>) -> Vec<&str> {
    let mut k: Vec<&str> = t.map.keys().map(|k| &**k).collect();
    k.sort();
    k
}

#[test]
fn drops_least_recently_used_full_bucket_before_any_other() {
    let mut t = table(3);
    take(&mut t, "a", 0, 10); // full at 1 s
    take(&mut t, "b", 0, 2); // full at 0.2 s
    take(&mut t, "c", 0, 1); // full at 0.1 s
    take(&mut t, "b", 0, 0); // b used again: now c is the least recently used full one
    take(&mut t, "d", SEC / 2, 1);
    assert_eq!(keys(&t), ["a", "b", "d"]);
    take(&mut t, "e", SEC / 2, 1);
    assert_eq!(keys(&t), ["a", "d", "e"], "b was full; a (older) was not");
}

#[test]
fn drops_least_recently_used_unpinned_when_none_full() {
    let mut t = table(3);
    let a = take(&mut t, "a", 0, 10);
    take(&mut t, "b", 0, 10);
    take(&mut t, "c", 0, 10);
    t.modify(a, 0, |_, w| w.0 = true); // a has waiters
    take(&mut t, "d", 0, 10);
    assert_eq!(keys(&t), ["a", "c", "d"]);
    assert_eq!(t.len(), 3);
}

#[test]
fn refuses_when_every_bucket_is_pinned() {
    let mut t = table(2);
    for k in ["a", "b"] {
        let id = take(&mut t, k, 0, 10);
        t.modify(id, 0, |_, w| w.0 = true);
    }
    assert_eq!(t.find_or_insert("c", 0), Err(TableFull));
    let a = t.find("a").unwrap();
    t.modify(a, 0, |_, w| w.0 = false);
    assert!(t.find_or_insert("c", 0).is_ok());
    assert_eq!(keys(&t), ["b", "c"]);
}

/// Every unpinned slot is in exactly one index, under the key it records; a `filling`
/// key is never later than the slot's true `full_at`; the LRU list holds them all.
fn check(t: &KeyTable<Flag>) {
    let mut unpinned = 0;
    for &id in t.map.values() {
        let s = &t.slots[id as usize];
        if s.extra.pinned() {
            continue;
        }
        unpinned += 1;
        if s.idx == IN_FULL {
            assert!(t.full.contains(&(s.seq, id)));
        } else {
            assert!(t.filling.contains(&(s.idx, id)));
            assert!(s.idx <= t.bucket.full_at(s.state));
        }
    }
    assert_eq!(t.full.len() + t.filling.len(), unpinned);
    let (mut n, mut at) = (0, t.lru_head);
    while at != NIL {
        (n, at) = (n + 1, t.slots[at as usize].next);
    }
    assert_eq!(n, unpinned);
}

#[test]
fn slots_are_reused_and_indexes_stay_consistent() {
    let mut t = table(4);
    let b = *t.bucket();
    for round in 0..200u64 {
        let now = round * SEC / 7;
        for k in 0..6 {
            let key = format!("k{}", (round * 3 + k) % 11);
            let Ok(id) = t.find_or_insert(&key, now) else {
                continue;
            };
            match (round + k) % 5 {
                0 => t.modify(id, now, |st, _| *st = b.give_back(*st, now, 3)),
                1 => t.modify(id, now, |_, w| w.0 = !w.0),
                _ => t.modify(id, now, |st, _| *st = b.take(*st, now, 1 + k % 3).1),
            }
            check(&t);
        }
        assert!(t.len() <= 4);
    }
    assert!(t.slots.len() <= 4, "slots reused: {}", t.slots.len());
}

#[test]
fn full_buckets_idle_past_idle_ttl_go_a_few_per_call_oldest_first() {
    let mut t = idle_table(10 * SEC);
    for i in 0..100 {
        take(&mut t, &format!("old-{i:03}"), 0, 1); // full at 0.1 s
    }
    take(&mut t, "recent", 5 * SEC, 1);
    // At 12 s the old ones are idle (used at 0), "recent" is not (used at 5 s).
    let now = 12 * SEC;
    let mut calls = 0;
    while t.len() > 2 {
        let before = t.len();
        t.find_or_insert("probe", now).unwrap();
        check(&t);
        let inserted = usize::from(calls == 0);
        let forgotten = before + inserted - t.len();
        assert!(
            forgotten >= 1,
            "every call forgets some while some are idle"
        );
        assert!(
            forgotten <= SWEEP_STEPS,
            "at most {SWEEP_STEPS} per call: {forgotten}"
        );
        calls += 1;
    }
    assert_eq!(keys(&t), ["probe", "recent"]);
    assert!(calls >= 100 / SWEEP_STEPS, "{calls} calls");
    assert_eq!(t.evicted(), 0, "lossless");
    t.find_or_insert("probe", 16 * SEC).unwrap();
    t.find_or_insert("probe", 16 * SEC).unwrap();
    assert_eq!(keys(&t), ["probe"], "recent, used at 5 s, is idle at 16 s");
}

#[test]
fn a_bucket_not_full_yet_is_kept_however_idle() {
    let mut t = idle_table(0);
    take(&mut t, "a", 0, 10); // full at 1 s
    for _ in 0..10 {
        t.find_or_insert("b", SEC / 2).unwrap();
    }
    assert!(t.find("a").is_some());
    t.find_or_insert("b", SEC).unwrap();
    t.find_or_insert("b", SEC).unwrap();
    assert!(t.find("a").is_none(), "full at 1 s, forgotten then");
}

#[test]
fn a_pinned_bucket_is_never_forgotten() {
    let mut t = idle_table(SEC);
    let a = take(&mut t, "a", 0, 1);
    t.modify(a, 0, |_, w| w.0 = true);
    for i in 1..20 {
        t.find_or_insert("b", i * 10 * SEC).unwrap();
        check(&t);
    }
    assert!(t.find("a").is_some(), "full and idle, but it has waiters");
    // Unpinned at 200 s: a use, so idle from then on.
    t.modify(a, 200 * SEC, |_, w| w.0 = false);
    t.find_or_insert("b", 200 * SEC + SEC / 2).unwrap();
    assert!(t.find("a").is_some());
    t.find_or_insert("b", 201 * SEC).unwrap();
    assert!(t.find("a").is_none());
}

#[test]
fn last_use_orders_like_a_counter_within_one_instant() {
    let mut t = idle_table(Nanos::MAX);
    let ids: Vec<u32> = (0..3)
        .map(|i| take(&mut t, &format!("k{i}"), 7, 0))
        .collect();
    let seqs: Vec<Nanos> = ids.iter().map(|&id| t.slots[id as usize].seq).collect();
    assert!(
        seqs[0] >= 7 && seqs[0] < seqs[1] && seqs[1] < seqs[2],
        "{seqs:?}"
    );
    // A later instant is taken as it is (inserted at 1000, then taken: one use later).
    take(&mut t, "k3", 1_000, 0);
    assert_eq!(t.slots[t.find("k3").unwrap() as usize].seq, 1_001);
}
