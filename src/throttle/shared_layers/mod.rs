//! The layers whose buckets live in a shared store (`store = "redis"`), and what happens when
//! that store fails (`on_error`).
//!
//! How a message takes from its shared layers (after its local ones, see `throttle`):
//! 1. It waits to be the head of its key's queue in each shared layer (the gates, in layer
//!    order): within this replica, FIFO per key, and `max_queue`/`max_keys` hold.
//! 2. The head makes **one** store call for all its shared layers, with what is left of its
//!    deadline as `max_wait` (0 when one of them is in reject mode: then they must all grant
//!    now). Granted: done. Reserved for instant T: it lets the next one ask at once and sleeps
//!    until T (giving the tokens back if it is dropped meanwhile); in a `fair_by` layer it
//!    holds that layer's turn until T, so this replica's backlog never holds reservations
//!    beyond the next one and a newcomer of another tenant is next in line. Refused: `451` with the
//!    store's retry time. `Later` (the in-process fallback): it sleeps, holding its place, and
//!    asks again.
//!
//! **on_error.** A store that cannot answer (unreachable, past the command timeout) is left
//! alone for [`crate::redis::RETRY`] ([`crate::redis::Outage`]), and meanwhile `on_error`
//! answers: `local` takes from in-process buckets of the same layers (each replica then allows
//! the full limit: N replicas, N times the rate, but mail flows), `reject` refuses with
//! [`ThrottleError::StoreUnavailable`] (`451 4.4.3`), `allow` lets the message through
//! unmetered. A warning is logged when the store goes away and a note when it is back; the
//! next call after `RETRY` tries the store again, so the relay returns to it by itself.
//! Tokens are given back to the store that granted them.
//!
//! **Shutdown.** [`Shared::drain`] (from `Throttle::drain`, at the signal) gives the grace's
//! end: a message asleep on a reservation or a `Later` whose instant comes by then sleeps on
//! and goes; one whose instant is later is woken at once with [`ThrottleError::Shutdown`]
//! (`421 4.3.2`), its reservation's tokens given back to the store first, while the runtime
//! still runs. A message that asks the store during the drain asks with its wait capped at
//! the grace's end; refused because its tokens would come later, it gets `Shutdown` too (a
//! refusal it would get anyway, within its own `max_wait`, stays `451 4.7.1`).
//! [`Shared::dispose`] (at the grace's end) wakes every sleeper with `Shutdown`; a message
//! already asking the store then still goes if the store grants it at once (a transaction in
//! flight); a new one is refused at its gate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use super::charge::Charge;
use super::error::{LimitReason, ThrottleError};
use super::layer::gate::{fair_gates, Gate};
use super::layer::{Layer, Turn};
use super::spec::LayerSpec;
use super::store::local::LocalStore;
use super::store::{Decision, Store, StoreCharge, StoreError};
use crate::clock::{Clock, Nanos};
use crate::config::{Mode, OnError};
use crate::redis::Outage;
use ending::Ending;
use giving_back::GiveBack;

mod ending;
mod giving_back;
mod reading;

pub use reading::StoreUnreachable;

/// The shared store of a throttle and the layers (by index) that use it.
pub struct SharedLayers {
    pub store: Arc<dyn Store>,
    pub layers: Vec<usize>,
    pub on_error: OnError,
}

/// Who granted a message's shared charges: where they go back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Store,
    Fallback,
    Allowed,
}

/// A message's shared charges, taken.
#[derive(Debug)]
pub(crate) struct SharedTaken {
    source: Source,
    pub(crate) charges: Vec<Charge>,
}

/// The messages a shared store could not decide (see [`Shared::undecided`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreErrors {
    /// Which store: each counts from 0.
    pub store: u64,
    pub on_error: OnError,
    pub total: u64,
}

pub(crate) struct Shared {
    store: Arc<dyn Store>,
    fallback: Arc<LocalStore>,
    on_error: OnError,
    clock: Arc<dyn Clock>,
    /// The store left alone for a while after a call failed.
    outage: Outage,
    /// Takes the store did not decide (it failed, or rests after failing): `on_error` did.
    undecided: AtomicU64,
    /// Which of the process's shared stores this is: a reload may bring a new one, whose
    /// count starts from 0 again.
    id: u64,
    /// Set by [`Shared::drain`] and [`Shared::dispose`]; the sleepers watch it.
    ending: watch::Sender<Ending>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A shared layer found upstream's throttle reply its message's tenant's alone: the message
/// is to wait before it asks again (see `blame`); `layer` and `key` are the blaming bucket's.
#[derive(Debug)]
pub(crate) struct Blamed {
    pub(crate) layer: usize,
    pub(crate) key: String,
}

/// The store's view of `charges`; those of the layers in `cut` carry upstream's throttle reply.
fn store_charges<'a>(charges: &'a [Charge], cut: &[usize]) -> Vec<StoreCharge<'a>> {
    charges
        .iter()
        .map(|c| StoreCharge {
            layer: c.layer,
            key: &c.key,
            cost: c.cost,
            cut: cut.contains(&c.layer),
            blame: &c.blame,
        })
        .collect()
}

/// Waits for the message's turn (the head of its key's queue) in each shared layer, in order.
async fn enter_gates<'a>(
    layers: &'a [Arc<Layer>],
    charges: &[Charge],
    now: Nanos,
    turn: Turn,
) -> Result<Vec<Gate<'a>>, ThrottleError> {
    let mut gates = Vec::with_capacity(charges.len());
    for c in charges {
        gates.push(
            layers[c.layer]
                .gate((&c.key, &c.fair), c.cost, now, turn)
                .await?,
        );
    }
    Ok(gates)
}

impl Shared {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        on_error: OnError,
        specs: &[LayerSpec],
        clock: Arc<dyn Clock>,
    ) -> Shared {
        Shared {
            store,
            fallback: Arc::new(LocalStore::for_layers(specs, clock.clone())),
            on_error,
            outage: Outage::new(clock.clone()),
            undecided: AtomicU64::new(0),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            clock,
            ending: watch::Sender::new(Ending::default()),
        }
    }

    /// Takes `charges` (shared layers, in layer order); the instant of the grant. `cut`: the
    /// layers a throttle reply to this message taught (see `StoreCharge::cut`); `Blamed` when
    /// one of them found the reply its tenant's alone (nothing taken, gates left).
    pub(crate) async fn acquire(
        &self,
        layers: &[Arc<Layer>],
        charges: Vec<Charge>,
        deadline: Nanos,
        now: Nanos,
        turn: Turn,
        cut: &[usize],
    ) -> Result<Result<(SharedTaken, Nanos), Blamed>, ThrottleError> {
        let gates = enter_gates(layers, &charges, now, turn).await?;
        let reject = charges
            .iter()
            .any(|c| layers[c.layer].spec().mode == Mode::Reject);
        // A message sent again after a throttle reply reports it in its first take, to the
        // layers it taught (`cut`).
        let mut cut = cut;
        loop {
            let drain_end = self.ending.borrow().drain_end;
            let max_wait = match reject {
                true => 0,
                false => deadline
                    .min(drain_end.unwrap_or(u64::MAX))
                    .saturating_sub(self.clock.now()),
            };
            let (source, decision) = self.take(&charges, max_wait, cut).await?;
            cut = &[];
            let answered = self.clock.now();
            match decision {
                Decision::Granted => return Ok(Ok((SharedTaken { source, charges }, answered))),
                Decision::Reserved { wait } => {
                    let _fair = fair_gates(layers, gates, &charges);
                    let taken = SharedTaken { source, charges };
                    return self
                        .wait_reserved(layers, taken, answered, wait)
                        .await
                        .map(Ok);
                }
                Decision::Blamed { charge } => {
                    let c = &charges[charge.min(charges.len() - 1)];
                    let (layer, key) = (c.layer, c.key.clone());
                    return Ok(Err(Blamed { layer, key }));
                }
                Decision::Later { wait } => self.sleep_until(answered.saturating_add(wait)).await?,
                Decision::Refused {
                    charge,
                    retry_after,
                } => {
                    if !reject
                        && drain_end.is_some_and(|end| answered.saturating_add(retry_after) > end)
                    {
                        return Err(ThrottleError::Shutdown);
                    }
                    let c = &charges[charge.min(charges.len() - 1)];
                    let reason = if reject {
                        LimitReason::Reject
                    } else {
                        LimitReason::MaxWait
                    };
                    let layer = &layers[c.layer];
                    return Err(layer.limited(&c.key, c.cost, retry_after, reason));
                }
                Decision::OverCapacity { charge, capacity } => {
                    return Err(over_capacity(layers, &charges, charge, capacity));
                }
            }
        }
    }

    /// Sleeps on a reservation: the tokens are taken, usable `wait` after `answered`; they go
    /// back to the store if the message is dropped meanwhile or the throttle disposed of.
    async fn wait_reserved(
        &self,
        layers: &[Arc<Layer>],
        taken: SharedTaken,
        answered: Nanos,
        wait: Nanos,
    ) -> Result<(SharedTaken, Nanos), ThrottleError> {
        let c = &taken.charges[0];
        tracing::debug!(
            target: "ratelimit",
            layer = %layers[c.layer].spec().name,
            key = %c.key,
            cost = c.cost,
            estimate_ms = wait.div_ceil(1_000_000),
            reserved = true,
            "ratelimit.waiting"
        );
        let at = answered.saturating_add(wait);
        let mut held = GiveBack {
            shared: self,
            taken: Some(taken),
        };
        let slept = self.sleep_until(at).await;
        let taken = held.taken.take().expect("armed");
        if let Err(shutdown) = slept {
            // Awaited, not spawned: a process about to exit may not run a spawned task. Should
            // this future be dropped meanwhile, the give-back is lost: quota, never the limit.
            self.give_back_now(taken).await;
            return Err(shutdown);
        }
        Ok((taken, at))
    }

    /// One take: from the store, or as `on_error` says when it cannot answer.
    async fn take(
        &self,
        charges: &[Charge],
        max_wait: Nanos,
        cut: &[usize],
    ) -> Result<(Source, Decision), ThrottleError> {
        let sc = store_charges(charges, cut);
        if let Some(result) = self.try_store(self.store.take(&sc, max_wait)).await {
            return Ok((Source::Store, result));
        }
        self.undecided.fetch_add(1, Ordering::Relaxed);
        match self.on_error {
            OnError::Local => {
                let d = self.fallback.take(&sc, max_wait).await;
                Ok((
                    Source::Fallback,
                    d.map_err(|_| ThrottleError::StoreUnavailable)?,
                ))
            }
            OnError::Allow => Ok((Source::Allowed, Decision::Granted)),
            OnError::Reject => Err(ThrottleError::StoreUnavailable),
        }
    }

    /// The takes the store could not decide so far, and who decided them instead: for
    /// `mailsluice_throttle_store_errors_total{on_error}`.
    pub(crate) fn undecided(&self) -> StoreErrors {
        StoreErrors {
            store: self.id,
            on_error: self.on_error,
            total: self.undecided.load(Ordering::Relaxed),
        }
    }

    /// The store's answer, or `None` when it failed or is left alone after a failure.
    async fn try_store<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Option<T> {
        if self.outage.resting() {
            return None;
        }
        match call.await {
            Ok(v) => {
                if self.outage.answered() {
                    tracing::info!(target: "ratelimit", "ratelimit.store_back");
                }
                Some(v)
            }
            Err(e) => {
                if self.outage.failed() {
                    tracing::warn!(
                        target: "ratelimit",
                        error = %e,
                        on_error = ?self.on_error,
                        "ratelimit.store_unavailable"
                    );
                }
                None
            }
        }
    }
}

/// A charge whose cost is more than its bucket can ever hold.
fn over_capacity(layers: &[Arc<Layer>], charges: &[Charge], i: usize, burst: u64) -> ThrottleError {
    let c = &charges[i.min(charges.len() - 1)];
    ThrottleError::CostOverBurst {
        layer: layers[c.layer].spec().name.clone(),
        cost: c.cost,
        burst,
    }
}

impl SharedTaken {
    /// The charges `which` picks, and the others, each granted by the same store.
    pub(crate) fn split(self, which: impl Fn(&Charge) -> bool) -> (SharedTaken, SharedTaken) {
        let (picked, others) = self.charges.into_iter().partition(which);
        let part = |charges| SharedTaken {
            source: self.source,
            charges,
        };
        (part(picked), part(others))
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("on_error", &self.on_error)
            .finish()
    }
}
