//! [`Again`]: a message upstream throttled, taking its tokens again, ahead of later arrivals;
//! and the wait of one whose reply was its tenant's alone (see `blame`), decided by a local
//! layer at the reply or by the shared store at the next take.

use super::{Blamed, Inner, Permit, Throttle, ThrottleError, Turn};
use crate::clock::{nanos, Nanos};
use crate::throttle::charge::Charge;
use crate::throttle::LimitReason;

/// A message upstream throttled, to be sent again: what it is charged, when it arrived.
#[derive(Debug)]
pub struct Again {
    pub(super) charges: Vec<Charge>,
    pub(super) arrival: Nanos,
    pub(super) order: u64,
    /// The shared adaptive layers the reply taught (it was about the rate, and not their
    /// tenant's alone): each cuts in the next take.
    pub(super) cut: Vec<usize>,
    pub(super) strikes: u32,
    /// The reply was its tenant's alone: it waits until then before it asks again (the
    /// blaming layer and key, for the refusal once that is past its budget).
    pub(super) slow: Option<(usize, String, Nanos)>,
    /// Nobody waits on it (see [`Throttle::acquire_patient`]).
    pub(super) patient: bool,
}

impl Throttle {
    /// Takes the tokens of a message upstream throttled, again: it waits ahead of every
    /// message that arrived after it, within the budget counted from its first arrival. A
    /// refusal's `retry_after` is the wait it would have needed.
    pub async fn acquire_again(&self, mut again: Again) -> Result<Permit, ThrottleError> {
        let turn = Turn {
            order: again.order,
            again: true,
        };
        loop {
            if let Some((layer, key, until)) = &again.slow {
                self.slowed(&again, (*layer, key), *until).await?;
            }
            let charges = again.charges.clone();
            match self
                .take(charges, again.arrival, turn, &again.cut, again.patient)
                .await?
            {
                Ok(mut permit) => {
                    permit.strikes = again.strikes;
                    return Ok(permit);
                }
                // The store found the reply the tenant's alone in a shared layer (and made
                // the other layers' cuts): slowed as a local layer's blame does.
                Err(Blamed { layer, key }) => {
                    again.strikes += 1;
                    again.cut.clear();
                    let until = slow_until(&self.inner, layer, again.strikes);
                    again.slow = Some((layer, key, until));
                }
            }
        }
    }

    /// The wait of a message whose throttle reply was its tenant's alone: until `until`, or
    /// refused at once (`layer`, `key`) when that is past its budget.
    async fn slowed(
        &self,
        again: &Again,
        (layer, key): (usize, &str),
        until: Nanos,
    ) -> Result<(), ThrottleError> {
        let now = self.inner.clock.now();
        let cost = again
            .charges
            .iter()
            .find(|c| c.layer == layer)
            .map_or(0, |c| c.cost);
        if until > self.deadline(&again.charges, again.arrival, again.patient) {
            let l = &self.inner.layers[layer];
            return Err(l.limited(
                key,
                cost,
                until.saturating_sub(now),
                LimitReason::TenantThrottled,
            ));
        }
        tokio::time::sleep_until(self.inner.clock.deadline(until)).await;
        Ok(())
    }
}

/// Until when a message whose throttle reply was its tenant's alone in `layer` waits, at its
/// `strikes`-th such reply: the layer's interval, twice as long at each.
pub(super) fn slow_until(inner: &Inner, layer: usize, strikes: u32) -> Nanos {
    let interval = nanos(inner.layers[layer].spec().interval);
    let wait = interval.saturating_mul(1 << strikes.saturating_sub(1).min(16));
    inner.clock.now().saturating_add(wait)
}
