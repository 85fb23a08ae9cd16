//! Where the guard's state lives: in this process, or in Redis shared by every replica.
//!
//! Why a trait: [`Reputation`](super::Reputation) asks the same questions of either place
//! (a tenant's standing, a count, an event, a suppression, the operator's reads and actions)
//! and then logs what changed the same way; what differs is only where the answers come from.
//!
//! Files: `local` ([`local::LocalReputation`]: the ledger, the attribution, the feedback ids
//! seen and the suppressions, behind one lock) and `redis` ([`redis::RedisReputation`]: the
//! same in Redis, its verdict cache, its scripts and keys under `redis/`); here the trait.
//!
//! The contract:
//! - Counting never fails: with Redis down the Redis store fails open (nothing paused, nothing
//!   suppressed, nothing counted; logged and counted in its error counter).
//! - An event fails when Redis does not answer ([`RedisUnavailable`]), so that its source
//!   sends it again; so do the operator's reads and actions, which say so to the operator.
//! - A verdict comes with how the tenant's standing changed ([`Change`]), which the caller logs:
//!   the store reports a change once, whichever message, event or replica saw it first.

pub mod local;
pub mod redis;

use std::future::Future;
use std::pin::Pin;

use super::events::Event;
use super::ledger::{Breach, Change, Counts};
use super::suppression::Suppression;
use super::{Applied, Standing};
use crate::redis::RedisUnavailable;

/// A boxed future, so that the trait is object-safe (`Box<dyn ReputationStore>`) and a
/// network store fits.
pub type ReputationFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The guard's state; see the module doc for the contract.
pub trait ReputationStore: Send + Sync {
    /// `key`'s verdict now, and how its standing changed.
    fn standing<'a>(&'a self, key: &'a str) -> ReputationFuture<'a, (Option<Breach>, Change)>;

    /// Counts `counts` for `key`, and remembers that it sent `message_id` (for the window).
    /// The verdict after it when the store judges at each count (Redis, whose answer is the
    /// tenant's counts anyway); else no breach and no change, judged at the next `standing`.
    fn add<'a>(
        &'a self,
        key: &'a str,
        counts: Counts,
        message_id: Option<&'a str>,
    ) -> ReputationFuture<'a, (Option<Breach>, Change)>;

    /// Suppresses `addresses` for `why` (failing open: not suppressed when Redis does not
    /// answer).
    fn suppress<'a>(
        &'a self,
        addresses: &'a [String],
        why: Suppression,
    ) -> ReputationFuture<'a, ()>;

    /// Applies one bounce or complaint: a repeat of a feedback id within the window counts
    /// nothing; its addresses are suppressed (dated `date`) when the guard suppresses; it counts
    /// for the tenant of its message (as recorded, else as tagged) or as unattributed.
    fn apply<'a>(
        &'a self,
        event: &'a Event,
        date: String,
    ) -> ReputationFuture<'a, Result<Applied, RedisUnavailable>>;

    /// Why `address` is refused at RCPT, if it is (failing open).
    fn suppressed<'a>(&'a self, address: &'a str) -> ReputationFuture<'a, Option<Suppression>>;

    /// Lifts the suppression of `address`; false when there was none.
    fn unsuppress<'a>(
        &'a self,
        address: &'a str,
    ) -> ReputationFuture<'a, Result<bool, RedisUnavailable>>;

    /// Forgets `key`'s window; false when it was not known.
    fn resume<'a>(&'a self, key: &'a str) -> ReputationFuture<'a, Result<bool, RedisUnavailable>>;

    /// Every tenant counted, sorted by key.
    fn standings(&self) -> ReputationFuture<'_, Result<Vec<Standing>, RedisUnavailable>>;

    /// Addresses suppressed now.
    fn suppressed_count(&self) -> ReputationFuture<'_, Result<usize, RedisUnavailable>>;

    /// Tenants past a limit now, as this process knows them (read without a call to Redis:
    /// it is the gauge's).
    fn paused(&self) -> usize;

    /// Events whose message no tenant was known for, read by this process.
    fn unattributed(&self) -> u64;

    /// Messages whose id is held for attribution now; `None` when they are not counted
    /// (in Redis they are keys that expire by themselves).
    fn tracked(&self) -> Option<usize>;

    /// Whether the state is shared by every replica (in Redis).
    fn is_shared(&self) -> bool;
}
