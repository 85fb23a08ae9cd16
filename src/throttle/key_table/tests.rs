//! Unit tests of the key table: eviction order and index consistency.

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

fn table(max_keys: usize) -> KeyTable<Flag> {
    KeyTable::new("t", Bucket::drip(10, 10, SEC), max_keys)
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
