//! A shared store for the throttle's unit tests, answering from a script of decisions.

use std::sync::Arc;

use crate::clock::Nanos;
use crate::throttle::peek::Peek;
use crate::throttle::store::{Decision, Store, StoreCharge, StoreError, StoreFuture};

/// A shared store that answers each take from a script of decisions (the last one repeats) and
/// records what it is given back.
pub(super) struct Scripted {
    answers: Vec<Decision>,
    /// When set, a take answers only once this is notified (a store call in flight).
    hold: Option<Arc<tokio::sync::Notify>>,
    takes: std::sync::Mutex<usize>,
    /// Each take's charges, as (layer, cut).
    pub(super) taken: std::sync::Mutex<Vec<Vec<(usize, bool)>>>,
    given_back: std::sync::Mutex<Vec<(usize, String, u64)>>,
}

impl Scripted {
    pub(super) fn new(answers: Vec<Decision>) -> Arc<Scripted> {
        Scripted::holding(answers, None)
    }

    pub(super) fn holding(
        answers: Vec<Decision>,
        hold: Option<Arc<tokio::sync::Notify>>,
    ) -> Arc<Scripted> {
        Arc::new(Scripted {
            answers,
            hold,
            takes: Default::default(),
            taken: Default::default(),
            given_back: Default::default(),
        })
    }

    pub(super) fn takes(&self) -> usize {
        *self.takes.lock().unwrap()
    }

    pub(super) fn given_back(&self) -> Vec<(usize, String, u64)> {
        self.given_back.lock().unwrap().clone()
    }
}

impl Store for Scripted {
    fn take<'a>(&'a self, charges: &'a [StoreCharge<'a>], _: Nanos) -> StoreFuture<'a, Decision> {
        let cuts = charges.iter().map(|c| (c.layer, c.cut)).collect();
        self.taken.lock().unwrap().push(cuts);
        let mut n = self.takes.lock().unwrap();
        let d = self.answers[(*n).min(self.answers.len() - 1)];
        *n += 1;
        let hold = self.hold.clone();
        Box::pin(async move {
            if let Some(hold) = hold {
                hold.notified().await;
            }
            Ok(d)
        })
    }

    fn give_back<'a>(&'a self, charges: &'a [StoreCharge<'a>]) -> StoreFuture<'a, ()> {
        let mut given = self.given_back.lock().unwrap();
        given.extend(charges.iter().map(|c| (c.layer, c.key.to_string(), c.cost)));
        Box::pin(std::future::ready(Ok(())))
    }

    fn peek<'a>(&'a self, _: usize, _: &'a str) -> StoreFuture<'a, Peek> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable(
            "peek".into(),
        ))))
    }
}
