//! Token-bucket math, pure: `(state, now, request) -> (decision, new state)`.
//!
//! Why pure: no clock reads and no I/O means every rule can be checked with plain numbers, and
//! the same functions serve the local store, the queues' wait estimates and (later) the checks of
//! a shared store. Why integers: a float bucket drifts over days; here nothing is ever rounded
//! away, so a bucket refilled for a year holds exactly what it should.
//!
//! A [`State`] is two `u64` words whose meaning depends on the refill mode; `State::default()`
//! is a fresh (full) bucket, so a bucket that is not stored at all reads as full.
//!
//! - **Drip** is GCRA (the generic cell rate algorithm: a bucket kept as the instant it would
//!   be full again, rather than as a count) on a scaled time line: one token is worth
//!   `interval` "scaled nanoseconds", and real nanoseconds count `limit` each. `S` is the scaled instant at which
//!   the bucket is full again; tokens now = `burst - (S - now*limit) / interval`. `S` is kept as
//!   `a` = ⌈S / limit⌉ (the nanosecond it is full, `full_at`) and `b` = `a*limit - S`.
//! - **FixedWindow**: `a` = end of the current window (0: none), `b` = tokens used in it.
//! - **None** (lifetime cap): `a` = instant the key is forgotten (last take + idle_ttl),
//!   `b` = tokens used; `b == 0` is a fresh bucket.

use crate::clock::Nanos;
pub use crate::config::Refill;

/// The stored state of one bucket; see the module doc for the meaning of the words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct State {
    a: u64,
    b: u64,
}

/// The answer to a take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    Granted,
    /// Not enough tokens: `cost` tokens will be there in exactly `wait` nanoseconds.
    NotYet {
        wait: Nanos,
    },
    /// The cost exceeds what the bucket can ever hold: a permanent refusal.
    OverCapacity,
}

/// The parameters of a bucket (one per layer). Immutable; all state lives in [`State`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    refill: Refill,
    capacity: u64,
    limit: u64,
    interval: Nanos,
    idle_ttl: Nanos,
    /// An adaptive layer's bucket below its configured burst: a cost above the capacity
    /// takes the whole capacity instead of never passing.
    clamp: bool,
}

impl Bucket {
    /// Holds `burst`, gains `limit` every `interval` ns. `limit` and `interval` of 0 are read
    /// as 1 (the config rejects them; this keeps the math total).
    pub fn drip(burst: u64, limit: u64, interval: Nanos) -> Bucket {
        Bucket::new(Refill::Drip, burst, limit, interval, 0)
    }

    /// Holds `limit`, refilled to full `interval` ns after a window's first take.
    pub fn fixed_window(limit: u64, interval: Nanos) -> Bucket {
        Bucket::new(Refill::FixedWindow, limit, limit, interval, 0)
    }

    /// A lifetime cap of `burst`, forgotten `idle_ttl` ns after the last take.
    pub fn lifetime(burst: u64, idle_ttl: Nanos) -> Bucket {
        Bucket::new(Refill::None, burst, 1, 1, idle_ttl)
    }

    fn new(refill: Refill, capacity: u64, limit: u64, interval: Nanos, ttl: Nanos) -> Bucket {
        Bucket {
            refill,
            capacity,
            limit: limit.max(1),
            interval: interval.max(1),
            idle_ttl: ttl,
            clamp: false,
        }
    }

    /// This bucket with its capacity lowered to `capacity` (an adaptive layer's burst that
    /// followed its limit down). A message may cost more than that, up to the configured
    /// burst, which is its permanent bound: it then takes the whole (lower) capacity.
    pub fn learned(self, capacity: u64) -> Bucket {
        Bucket {
            capacity: capacity.min(self.capacity),
            clamp: true,
            ..self
        }
    }

    /// What a cost takes from this bucket (see [`Bucket::learned`]).
    fn charged(&self, cost: u64) -> u64 {
        match self.clamp {
            true => cost.min(self.capacity),
            false => cost,
        }
    }

    pub fn refill(&self) -> Refill {
        self.refill
    }

    /// The most tokens the bucket holds (`burst`, or `limit` for a fixed window).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Takes `cost` tokens at `now`, or says exactly when they will be there.
    pub fn take(&self, st: State, now: Nanos, cost: u64) -> (Take, State) {
        let cost = self.charged(cost);
        if cost > self.capacity {
            return (Take::OverCapacity, st);
        }
        if cost == 0 {
            return (Take::Granted, st);
        }
        match self.refill {
            Refill::Drip => self.drip_take(st, now, cost),
            Refill::FixedWindow => self.window_take(st, now, cost),
            Refill::None => self.lifetime_take(st, now, cost),
        }
    }

    /// The earliest instant (≥ `now`) at which `cost` tokens can be taken, if nothing else
    /// takes before; `None` when the cost exceeds the capacity.
    pub fn earliest(&self, st: State, now: Nanos, cost: u64) -> Option<Nanos> {
        match self.take(st, now, cost).0 {
            Take::Granted => Some(now),
            Take::NotYet { wait } => Some(now.saturating_add(wait)),
            Take::OverCapacity => None,
        }
    }

    /// Takes `cost` at the earliest instant it can: `(that instant, state after)`. Folding this
    /// over a queue gives each waiter's grant time and the wait estimate of a newcomer.
    pub fn reserve(&self, st: State, now: Nanos, cost: u64) -> Option<(Nanos, State)> {
        let at = self.earliest(st, now, cost)?;
        match self.take(st, at, cost) {
            (Take::Granted, next) => Some((at, next)),
            _ => None,
        }
    }

    /// Returns `cost` tokens (a rollback or an upstream failure), capped at the capacity.
    pub fn give_back(&self, st: State, now: Nanos, cost: u64) -> State {
        let cost = self.charged(cost);
        match self.refill {
            Refill::Drip => {
                let scaled = u128::from(cost) * u128::from(self.interval);
                let s = self.scaled(st).saturating_sub(scaled);
                self.state_at_scaled(s.max(self.scaled_now(now)))
            }
            Refill::FixedWindow | Refill::None if self.used(st, now) > 0 => State {
                a: st.a,
                b: st.b.saturating_sub(cost),
            },
            _ => st,
        }
    }

    /// `st` of the bucket `from` as a state of this one (same refill and interval, another
    /// limit), holding the same tokens at `now`, at most this one's capacity: an adaptive
    /// layer's limit changed. Tokens already taken stay taken, once: a smaller burst drops
    /// the tokens held above it, it does not charge again what was taken.
    pub fn converted(&self, from: &Bucket, st: State, now: Nanos) -> State {
        if self.refill != Refill::Drip || from.refill != Refill::Drip {
            return st;
        }
        let debt = from.scaled(st).saturating_sub(from.scaled_now(now));
        let shrink = from.capacity.saturating_sub(self.capacity);
        let debt = debt.saturating_sub(u128::from(shrink) * u128::from(self.interval));
        self.state_at_scaled(self.scaled_now(now) + debt)
    }

    /// Whole tokens available at `now`.
    pub fn remaining(&self, st: State, now: Nanos) -> u64 {
        match self.refill {
            Refill::Drip => {
                let cap = u128::from(self.capacity) * u128::from(self.interval);
                let debt = self.scaled(st).saturating_sub(self.scaled_now(now));
                let level = cap.saturating_sub(debt) / u128::from(self.interval);
                u64::try_from(level).unwrap_or(u64::MAX)
            }
            _ => self.capacity.saturating_sub(self.used(st, now)),
        }
    }

    /// When a fixed window with an active window refills; `None` for every other bucket.
    pub fn reset_at(&self, st: State, now: Nanos) -> Option<Nanos> {
        (self.refill == Refill::FixedWindow && st.a > now).then_some(st.a)
    }

    /// The instant from which the bucket is indistinguishable from a fresh one, so dropping it
    /// loses nothing. A fixed window counts as full only once its window has ended (its anchor
    /// still matters before that); a lifetime cap once forgotten or wholly given back.
    pub fn full_at(&self, st: State) -> Nanos {
        match self.refill {
            Refill::None if st.b == 0 => 0,
            _ => st.a,
        }
    }

    // Drip (GCRA) --------------------------------------------------------------------------

    fn scaled(&self, st: State) -> u128 {
        u128::from(st.a) * u128::from(self.limit) - u128::from(st.b)
    }

    fn scaled_now(&self, now: Nanos) -> u128 {
        u128::from(now) * u128::from(self.limit)
    }

    fn state_at_scaled(&self, s: u128) -> State {
        let limit = u128::from(self.limit);
        match u64::try_from(s.div_ceil(limit)) {
            Ok(a) => State {
                a,
                b: (u128::from(a) * limit - s) as u64,
            },
            Err(_) => State { a: u64::MAX, b: 0 },
        }
    }

    fn drip_take(&self, st: State, now: Nanos, cost: u64) -> (Take, State) {
        let now_s = self.scaled_now(now);
        let cap = u128::from(self.capacity) * u128::from(self.interval);
        let need = self.scaled(st).max(now_s) + u128::from(cost) * u128::from(self.interval);
        if need <= now_s + cap {
            return (Take::Granted, self.state_at_scaled(need));
        }
        let wait = (need - cap - now_s).div_ceil(u128::from(self.limit));
        let wait = u64::try_from(wait).unwrap_or(u64::MAX);
        (Take::NotYet { wait }, st)
    }

    // Fixed window and lifetime -------------------------------------------------------------

    /// Tokens used at `now`: 0 once the window has ended or the lifetime key is forgotten.
    fn used(&self, st: State, now: Nanos) -> u64 {
        if st.b > 0 && st.a > now {
            st.b
        } else {
            0
        }
    }

    fn window_take(&self, st: State, now: Nanos, cost: u64) -> (Take, State) {
        if st.a <= now {
            let end = now.saturating_add(self.interval);
            return (Take::Granted, State { a: end, b: cost });
        }
        if st.b + cost <= self.capacity {
            return (
                Take::Granted,
                State {
                    a: st.a,
                    b: st.b + cost,
                },
            );
        }
        (Take::NotYet { wait: st.a - now }, st)
    }

    fn lifetime_take(&self, st: State, now: Nanos, cost: u64) -> (Take, State) {
        let used = self.used(st, now);
        if used + cost <= self.capacity {
            // max: a caller's early clock reading never brings the expiry forward.
            let forget_at = now.saturating_add(self.idle_ttl).max(st.a);
            return (
                Take::Granted,
                State {
                    a: forget_at,
                    b: used + cost,
                },
            );
        }
        (Take::NotYet { wait: st.a - now }, st)
    }
}

#[cfg(test)]
mod tests;
