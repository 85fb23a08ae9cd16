//! A map whose entries expire a fixed time after they were first put in, and which holds at
//! most `max` of them (past it, the oldest goes). The one shape of the guard's memory: message
//! ids kept for attribution, feedback ids kept to drop repeated events, suppressed addresses.

use std::collections::{HashMap, VecDeque};

use crate::clock::Nanos;

#[derive(Debug)]
pub struct Expiring<V> {
    entries: HashMap<Box<str>, (V, Nanos)>,
    /// Keys in the order they were put in, with when: the oldest is at the front. A key taken
    /// out by `remove` leaves its place here until it reaches the front (or a compaction).
    order: VecDeque<(Nanos, Box<str>)>,
    max: usize,
    ttl: Nanos,
}

/// What `insert` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    New,
    /// The key was there: its value and time are kept (a repeat, not news).
    Known,
    /// A new key, for which the oldest entry was dropped (the map was full).
    Evicted,
}

impl<V> Expiring<V> {
    pub fn new(max: usize, ttl: Nanos) -> Expiring<V> {
        Expiring {
            entries: HashMap::new(),
            order: VecDeque::new(),
            max: max.max(1),
            ttl,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Puts `key` in at `now`, unless it is there already.
    pub fn insert(&mut self, key: &str, value: V, now: Nanos) -> Inserted {
        self.expire(now);
        if self.entries.contains_key(key) {
            return Inserted::Known;
        }
        let mut inserted = Inserted::New;
        while self.entries.len() >= self.max {
            self.pop_oldest();
            inserted = Inserted::Evicted;
        }
        self.entries.insert(key.into(), (value, now));
        self.order.push_back((now, key.into()));
        inserted
    }

    /// The value of `key`, unless it expired.
    pub fn get(&self, key: &str, now: Nanos) -> Option<&V> {
        let (value, at) = self.entries.get(key)?;
        (now.saturating_sub(*at) < self.ttl).then_some(value)
    }

    pub fn remove(&mut self, key: &str) -> Option<V> {
        let (value, _) = self.entries.remove(key)?;
        // Removed keys leave places in `order`; they never hold more than the entries do.
        if self.order.len() > 2 * self.max {
            let entries = &self.entries;
            self.order
                .retain(|(at, k)| entries.get(k).is_some_and(|(_, t)| t == at));
        }
        Some(value)
    }

    /// Drops what is `ttl` old or older.
    pub fn expire(&mut self, now: Nanos) {
        while let Some((at, _)) = self.order.front() {
            if now.saturating_sub(*at) < self.ttl {
                break;
            }
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        while let Some((at, key)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|(_, t)| *t == at) {
                self.entries.remove(&key);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_its_bound_the_oldest_goes() {
        let mut m = Expiring::new(3, 100);
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            assert_eq!(m.insert(k, i, i as u64), Inserted::New);
        }
        assert_eq!(m.insert("a", 9, 5), Inserted::Known);
        assert_eq!(m.get("a", 5), Some(&0), "a repeat keeps the first value");
        assert_eq!(m.insert("d", 3, 6), Inserted::Evicted);
        assert_eq!(m.len(), 3);
        assert_eq!(m.get("a", 6), None);
        assert_eq!(m.get("d", 6), Some(&3));
    }

    #[test]
    fn entries_expire_after_ttl() {
        let mut m = Expiring::new(10, 100);
        m.insert("a", (), 0);
        m.insert("b", (), 50);
        assert!(m.get("a", 99).is_some());
        assert!(m.get("a", 100).is_none());
        m.expire(120);
        assert_eq!(m.len(), 1);
        assert!(m.get("b", 120).is_some());
    }

    #[test]
    fn removes_and_reinserts_keep_the_order_bounded() {
        let mut m = Expiring::new(2, u64::MAX);
        for t in 0..1000 {
            m.insert("x", t, t);
            assert_eq!(m.remove("x"), Some(t));
        }
        assert!(m.order.len() <= 4, "{}", m.order.len());
        m.insert("a", 1, 2000);
        m.insert("b", 2, 2001);
        assert_eq!(m.insert("c", 3, 2002), Inserted::Evicted);
        assert!(m.get("a", 2002).is_none() && m.get("b", 2002).is_some());
    }
}
