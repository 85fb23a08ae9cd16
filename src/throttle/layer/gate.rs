//! The turn of a shared (Redis) layer: FIFO per key in this replica, in front of the store
//! (with `fair_by`, in turn by fair key, as in a local queue: see `waiters`).
//!
//! Why a gate and not the local bucket: the tokens live in the store, so the queue here only
//! decides who asks next. Only the head of a key's queue calls the store; it holds the gate
//! for one round trip (the store answers at once: granted, reserved for instant T, or refused)
//! and then lets the next one ask. So within a replica a later message never overtakes an
//! earlier one of its key, and across replicas the store's reservations keep the order.
//! `max_queue` and `max_keys` hold as for a local layer; the wait estimate and `max_wait` are
//! the store's (it refuses a reservation past `max_wait`).
//!
//! Cancel-safe like the local queue: a dropped [`Gate`] (or a dropped future waiting for
//! one) leaves the queue and wakes the new head.

use std::sync::Arc;

use tokio::sync::Notify;

use super::{CancelOnDrop, Layer, Turn};
use crate::clock::Nanos;
use crate::throttle::bucket::State;
use crate::throttle::charge::Charge;
use crate::throttle::error::{LimitReason, ThrottleError};
use crate::throttle::key_table::TableFull;

/// The right to ask the store for one key of one layer; dropping it lets the next one ask.
pub(crate) struct Gate<'a> {
    _queued: CancelOnDrop<'a>,
}

impl Layer {
    /// Waits (FIFO) until the message is the head of `key`'s queue in this replica.
    pub(crate) async fn gate(
        &self,
        (key, fair): (&str, &str),
        cost: u64,
        now: Nanos,
        turn: Turn,
    ) -> Result<Gate<'_>, ThrottleError> {
        let (slot, id, notify) = self.enter_gate((key, fair), cost, now, turn)?;
        let mut guard = CancelOnDrop {
            layer: self,
            slot,
            id,
            armed: true,
        };
        loop {
            {
                let st = self.lock();
                if st.disposed {
                    guard.armed = false;
                    return Err(ThrottleError::Shutdown);
                }
                if st.table.extra(slot).head().is_some_and(|w| w.id == id) {
                    return Ok(Gate { _queued: guard });
                }
            }
            notify.notified().await;
        }
    }

    fn enter_gate(
        &self,
        (key, fair): (&str, &str),
        cost: u64,
        now: Nanos,
        turn: Turn,
    ) -> Result<(u32, u64, Arc<Notify>), ThrottleError> {
        self.check_cost(cost)?;
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.disposed {
            return Err(ThrottleError::Shutdown);
        }
        let slot = (st.table.find_or_insert(key, now))
            .map_err(|TableFull| self.limited(key, cost, self.hint(), LimitReason::MaxKeys))?;
        self.gate_admits(st, slot, key, cost)?;
        // A fair layer's turn to ask: by tag, as in a local queue, but never ahead of the
        // head, which may be asking the store right now.
        let q = st.table.extra(slot);
        let head = q.head().map(|h| h.tag);
        let place = (self.spec.fair_of(fair, cost)).map(|(f, c, w)| {
            let (tag, pos) = q.place(f, c, w);
            match head {
                Some(h) => (tag.max(h), pos.max(1)),
                None => (tag, pos),
            }
        });
        let (id, notify) = st.enqueue(
            (slot, fair, place),
            cost,
            now,
            (State::default(), now),
            turn,
        );
        Ok((slot, id, notify))
    }
}

/// The gates of the `fair_by` layers, kept through a reservation's wait (the others are let
/// go): the next message of this replica then asks only when this one's tokens are due, so
/// who goes next is decided by the fair queue here, not by the store's FIFO of reservations.
pub(crate) fn fair_gates<'a>(
    layers: &[Arc<Layer>],
    gates: Vec<Gate<'a>>,
    charges: &[Charge],
) -> Vec<Gate<'a>> {
    (gates.into_iter().zip(charges))
        .filter(|(_, c)| layers[c.layer].spec().fair)
        .map(|(g, _)| g)
        .collect()
}
