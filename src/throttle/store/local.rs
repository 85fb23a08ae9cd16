//! The in-process [`Store`]: one [`KeyTable`] per layer, each behind its own mutex.
//!
//! Why it exists next to the queues' own tables: it is the [`Store`] contract in its simplest
//! form, so a shared store (Redis) can be tested against the same expectations, and it is what a
//! shared layer falls back to when its store fails (`on_error = "local"`). A multi-layer take
//! locks the layers in index order (no deadlock), checks every charge on copies of the states,
//! and commits only when every charge can be taken now: nothing is taken on refusal.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{Decision, Store, StoreCharge, StoreError, StoreFuture};
use crate::clock::{nanos, Clock, Nanos};
use crate::throttle::bucket::{Bucket, State, Take};
use crate::throttle::key_table::KeyTable;
use crate::throttle::peek::{peek_of, Peek};
use crate::throttle::spec::LayerSpec;

/// In-process buckets behind the [`Store`] trait; see the module doc.
pub struct LocalStore {
    clock: Arc<dyn Clock>,
    layers: Vec<Mutex<KeyTable<()>>>,
}

type Guards<'a> = Vec<(usize, MutexGuard<'a, KeyTable<()>>)>;

impl LocalStore {
    /// One table per layer: `(layer name, bucket, max_keys)`. These tables forget a bucket only
    /// to make room; [`LocalStore::for_layers`] also forgets idle ones, as the layers do.
    pub fn new(layers: Vec<(String, Bucket, usize)>, clock: Arc<dyn Clock>) -> LocalStore {
        let layers = layers
            .into_iter()
            .map(|(name, bucket, max_keys)| KeyTable::new(&name, bucket, max_keys, Nanos::MAX))
            .map(Mutex::new)
            .collect();
        LocalStore { clock, layers }
    }

    /// One table per layer, as the layer's own table would be (`max_keys`, `idle_ttl`).
    pub fn for_layers(specs: &[LayerSpec], clock: Arc<dyn Clock>) -> LocalStore {
        let layers = specs
            .iter()
            .map(|s| KeyTable::new(&s.name, s.bucket(), s.max_keys, nanos(s.idle_ttl)))
            .map(Mutex::new)
            .collect();
        LocalStore { clock, layers }
    }

    /// Locks every layer the charges name, once each, in index order.
    fn lock(&self, charges: &[StoreCharge<'_>]) -> Result<Guards<'_>, StoreError> {
        let mut ids: Vec<usize> = charges.iter().map(|c| c.layer).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .map(|i| {
                let table = self.layers.get(i).ok_or(StoreError::UnknownLayer(i))?;
                Ok((i, table.lock().unwrap_or_else(|e| e.into_inner())))
            })
            .collect()
    }

    fn take_now(
        &self,
        charges: &[StoreCharge<'_>],
        max_wait: Nanos,
    ) -> Result<Decision, StoreError> {
        let mut guards = self.lock(charges)?;
        let now = self.clock.now();
        if let Some(over) = over_capacity(&guards, charges) {
            return Ok(over);
        }
        let (charge, wait) = worst_wait(&guards, charges, now);
        if wait == 0 {
            for c in charges {
                let table = table_mut(&mut guards, c.layer);
                let Ok(id) = table.find_or_insert(c.key, now) else {
                    unreachable!("a table without waiters always has room");
                };
                let b = *table.bucket();
                table.modify(id, now, |st, _| {
                    let (taken, next) = b.take(*st, now, c.cost);
                    debug_assert_eq!(taken, Take::Granted);
                    *st = next;
                });
            }
            return Ok(Decision::Granted);
        }
        if wait <= max_wait {
            return Ok(Decision::Later { wait });
        }
        Ok(Decision::Refused {
            charge,
            retry_after: wait,
        })
    }

    fn give_back_now(&self, charges: &[StoreCharge<'_>]) -> Result<(), StoreError> {
        let mut guards = self.lock(charges)?;
        let now = self.clock.now();
        for c in charges {
            let table = table_mut(&mut guards, c.layer);
            if let Some(id) = table.find(c.key) {
                let b = *table.bucket();
                table.modify(id, now, |st, _| *st = b.give_back(*st, now, c.cost));
            }
        }
        Ok(())
    }

    pub(crate) fn peek_now(&self, layer: usize, key: &str) -> Result<Peek, StoreError> {
        let table = self
            .layers
            .get(layer)
            .ok_or(StoreError::UnknownLayer(layer))?;
        let table = table.lock().unwrap_or_else(|e| e.into_inner());
        let st = table
            .find(key)
            .map(|id| table.state(id))
            .unwrap_or_default();
        Ok(peek_of(table.bucket(), st, self.clock.now(), &*self.clock))
    }
}

fn table<'g>(guards: &'g Guards<'_>, layer: usize) -> &'g KeyTable<()> {
    let (_, g) = guards.iter().find(|(i, _)| *i == layer).expect("locked");
    g
}

fn table_mut<'g, 'a>(guards: &'g mut Guards<'a>, layer: usize) -> &'g mut KeyTable<()> {
    let (_, g) = guards
        .iter_mut()
        .find(|(i, _)| *i == layer)
        .expect("locked");
    g
}

fn over_capacity(guards: &Guards<'_>, charges: &[StoreCharge<'_>]) -> Option<Decision> {
    charges.iter().enumerate().find_map(|(i, c)| {
        let capacity = table(guards, c.layer).bucket().capacity();
        (c.cost > capacity).then_some(Decision::OverCapacity {
            charge: i,
            capacity,
        })
    })
}

/// The longest wait among the charges (and which charge it is), folding charges that hit the
/// same bucket in order on a copy of its state.
fn worst_wait(guards: &Guards<'_>, charges: &[StoreCharge<'_>], now: Nanos) -> (usize, Nanos) {
    let mut copies: Vec<(usize, &str, State, Nanos)> = Vec::new();
    let mut worst = (0, 0);
    for (i, c) in charges.iter().enumerate() {
        let t = table(guards, c.layer);
        let pos = copies
            .iter()
            .position(|(l, k, _, _)| *l == c.layer && *k == c.key);
        let pos = pos.unwrap_or_else(|| {
            let st = t.find(c.key).map(|id| t.state(id)).unwrap_or_default();
            copies.push((c.layer, c.key, st, now));
            copies.len() - 1
        });
        let (_, _, st, from) = copies[pos];
        let (at, next) = t
            .bucket()
            .reserve(st, from, c.cost)
            .expect("within capacity");
        copies[pos].2 = next;
        copies[pos].3 = at;
        if at - now > worst.1 {
            worst = (i, at - now);
        }
    }
    worst
}

impl Store for LocalStore {
    fn take<'a>(
        &'a self,
        charges: &'a [StoreCharge<'a>],
        max_wait: Nanos,
    ) -> StoreFuture<'a, Decision> {
        Box::pin(std::future::ready(self.take_now(charges, max_wait)))
    }

    fn give_back<'a>(&'a self, charges: &'a [StoreCharge<'a>]) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(self.give_back_now(charges)))
    }

    fn peek<'a>(&'a self, layer: usize, key: &'a str) -> StoreFuture<'a, Peek> {
        Box::pin(std::future::ready(self.peek_now(layer, key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    const SEC: Nanos = 1_000_000_000;

    fn store(clock: Arc<FakeClock>) -> LocalStore {
        let layers = vec![
            ("tenant".to_string(), Bucket::drip(10, 10, SEC), 100),
            (
                "daily".to_string(),
                Bucket::fixed_window(3, 86_400 * SEC),
                100,
            ),
        ];
        LocalStore::new(layers, clock)
    }

    fn ch(layer: usize, key: &str, cost: u64) -> StoreCharge<'_> {
        StoreCharge {
            layer,
            key,
            cost,
            ..StoreCharge::default()
        }
    }

    #[tokio::test]
    async fn later_within_max_wait_takes_nothing() {
        let clock = Arc::new(FakeClock::new(0));
        let s = store(clock.clone());
        assert_eq!(
            s.take(&[ch(0, "k", 10)], 0).await.unwrap(),
            Decision::Granted
        );
        let d = s.take(&[ch(0, "k", 3)], SEC).await.unwrap();
        assert_eq!(d, Decision::Later { wait: 300_000_000 });
        assert_eq!(s.peek(0, "k").await.unwrap().remaining, 0);
        clock.advance(std::time::Duration::from_millis(300));
        assert_eq!(
            s.take(&[ch(0, "k", 3)], SEC).await.unwrap(),
            Decision::Granted
        );
    }
}
