//! Where bucket state lives: the boundary between the queues and the buckets.
//!
//! Why a trait: with several replicas, the buckets must live in a store they share
//! ([`redis::RedisStore`]), and a message charged to several layers must be taken from all of
//! them in **one atomic call**, on the store's clock, or two replicas could each take half. The
//! FIFO queues of the layers stay in each process, in front of the store: only the head of a
//! local queue asks the store, so a process never overtakes its own earlier messages.
//!
//! Files: `local` ([`local::LocalStore`], in process) and `redis` ([`redis::RedisStore`], its
//! Lua scripts and key names under `redis/`); here the trait and its answers.
//!
//! The contract of [`Store::take`]:
//! - [`Decision::Granted`]: taken from every bucket, usable now.
//! - [`Decision::Reserved`]: taken from every bucket, usable in `wait` (≤ `max_wait`). A shared
//!   store answers this, so replicas keep FIFO order without polling: the caller sleeps exactly
//!   `wait`, and gives the tokens back if it gives up (client gone, shutdown).
//! - [`Decision::Later`]: nothing taken; the tokens would be there in `wait` (≤ `max_wait`) if
//!   nobody else takes first. A store that alone serves its buckets (this process's) answers
//!   this: the caller is the only one who could take, so asking again then is exact.
//! - [`Decision::Refused`] / [`Decision::OverCapacity`]: nothing taken, whatever the layers.
//!
//! Times are durations, not instants: the store's clock (Redis `TIME`) is not this process's.
//!
//! [`local::LocalStore`] is the in-process key tables behind this trait: the reference
//! implementation a Redis store is tested against, and the fallback of `on_error = "local"`.

pub mod local;
pub mod redis;

use std::future::Future;
use std::pin::Pin;

use super::peek::Peek;
use crate::clock::Nanos;
use crate::redis::RedisUnavailable;

/// One bucket to take from: `cost` tokens of `key` in layer `layer`. For a store that keeps
/// adaptive layers' limits (Redis): `cut`, upstream's throttle reply to this message taught
/// this charge's adaptive layer, which cuts in the same atomic take unless the reply is
/// `blame`'s alone ([`Decision::Blamed`]); `blame` is whom the layer blames for a reply to
/// the message (see `Charge::blame`), noted at each grant so that every replica's grants count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreCharge<'a> {
    pub layer: usize,
    pub key: &'a str,
    pub cost: u64,
    pub cut: bool,
    pub blame: &'a str,
}

/// The answer of [`Store::take`]; see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Granted,
    Reserved {
        wait: Nanos,
    },
    Later {
        wait: Nanos,
    },
    /// `charge` is the index of a refusing charge; `retry_after` when all would be there.
    Refused {
        charge: usize,
        retry_after: Nanos,
    },
    OverCapacity {
        charge: usize,
        capacity: u64,
    },
    /// A `cut` charge's layer found upstream's reply its tenant's alone: nothing taken (the
    /// other charges' cuts are made); the message waits before it asks again.
    Blamed {
        charge: usize,
    },
}

/// A store that could not answer (a shared store unreachable); the caller's `on_error` decides.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Redis did not answer (the Redis store's calls).
    #[error(transparent)]
    Redis(#[from] RedisUnavailable),
    #[error("unknown layer {0}")]
    UnknownLayer(usize),
}

/// A boxed future, so that the trait is object-safe (`Arc<dyn Store>`) and a network store fits.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Bucket state for every layer that uses this store; see the module doc for the contract.
pub trait Store: Send + Sync {
    /// Takes `cost` from every charged bucket in one atomic step, or takes nothing. Waits
    /// longer than `max_wait` are refused with the wait as `retry_after`.
    fn take<'a>(
        &'a self,
        charges: &'a [StoreCharge<'a>],
        max_wait: Nanos,
    ) -> StoreFuture<'a, Decision>;

    /// The limit in force of an adaptive layer as the store last said (`None`: it keeps none).
    fn learned_limit(&self, _layer: usize) -> Option<u64> {
        None
    }

    /// Returns tokens taken (or reserved) earlier, capped at each bucket's capacity.
    fn give_back<'a>(&'a self, charges: &'a [StoreCharge<'a>]) -> StoreFuture<'a, ()>;

    /// The allowance of one bucket, taking nothing (`waiting` is 0: the store has no queues).
    fn peek<'a>(&'a self, layer: usize, key: &'a str) -> StoreFuture<'a, Peek>;
}
