//! The [`Store`] trait over the Redis store's calls (`take_all`, `give_back_all`,
//! `peek_one` in `redis.rs`).

use super::RedisStore;
use crate::clock::Nanos;
use crate::throttle::peek::Peek;
use crate::throttle::store::{Decision, Store, StoreCharge, StoreFuture};

impl Store for RedisStore {
    fn take<'a>(
        &'a self,
        charges: &'a [StoreCharge<'a>],
        max_wait: Nanos,
    ) -> StoreFuture<'a, Decision> {
        Box::pin(self.take_all(charges, max_wait))
    }

    fn learned_limit(&self, layer: usize) -> Option<u64> {
        self.heard.get(layer)
    }

    fn give_back<'a>(&'a self, charges: &'a [StoreCharge<'a>]) -> StoreFuture<'a, ()> {
        Box::pin(self.give_back_all(charges))
    }

    fn peek<'a>(&'a self, layer: usize, key: &'a str) -> StoreFuture<'a, Peek> {
        Box::pin(self.peek_one(layer, key))
    }
}
