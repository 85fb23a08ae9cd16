//! The effective limit of an adaptive layer, pure: `(state, now) -> limit`.
//!
//! Why: a provider's real rate (SES's sending rate, a smarthost's policy) is often lower than
//! configured, and it says so only by refusing (`454 Throttling failure`). Two rules answer a
//! throttle reply (the layer's `adapt`):
//! - **measured** (default): the limit goes at once to what upstream accepted over the last
//!   interval, times [`MARGIN_PCT`] %, never below the floor and never up. What upstream
//!   accepted is counted here: tokens granted minus tokens of messages it throttled, over a
//!   sliding interval (the current window plus the part of the previous one still inside the
//!   last `interval`). Why the margin: the measured rate is what upstream's own bucket let
//!   through while it was empty; sending at 90 % of it lets that bucket refill, so the next
//!   rise of the limit meets a full upstream bucket rather than a `454`, and 90 % of the
//!   hidden rate is still used. Why no once-per-interval rule: the cut only ever goes down
//!   to a measurement, so later replies of the same burst refine it (messages in flight at
//!   the first reply are counted as sent until their own reply comes) instead of cutting
//!   blindly again. **A measurement needs [`MIN_SAMPLE`] tokens granted** over the last
//!   interval (fewer when the configured limit is lower): a lone `454` on a quiet upstream
//!   says nothing about the rate, so it does not cut.
//! - **multiplicative**: the limit goes to 70 %, at most once per interval.
//!
//! Under both, after ten intervals without a throttle reply the limit climbs back by 5 % of
//! the configured limit per interval. Time is an argument, so tests and the Redis script
//! compute the same.
//!
//! The state is integers, so a shared store can hold it as it holds a bucket: `value` (the
//! limit at `since`), `since` (the last throttle reply), `cut` (the last cut) and the counts
//! of the measurement windows.

use crate::clock::Nanos;
pub use crate::config::Adapt;

/// The numbers of one adaptive layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aimd {
    /// The configured limit: the ceiling.
    pub limit: u64,
    /// The floor (`min_limit`).
    pub min: u64,
    pub interval: Nanos,
    pub rule: Adapt,
}

/// What a layer has learned; `Default` is "nothing yet": the configured limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Learned {
    /// The limit at `since`; 0 means the configured limit.
    pub value: u64,
    pub since: Nanos,
    /// When the limit was last cut; 0 with `value == 0`: never.
    pub cut: Nanos,
    /// The start of the current measurement window (a multiple of the interval).
    pub window: Nanos,
    /// Tokens granted, and tokens of messages upstream throttled, in the current window.
    pub granted: u64,
    pub refused: u64,
    /// The same of the window before.
    pub prev_granted: u64,
    pub prev_refused: u64,
}

/// Intervals without a throttle reply before the limit climbs again.
pub const QUIET_INTERVALS: u64 = 10;

/// The measured rule's margin: the limit goes to this share of what upstream accepted.
pub const MARGIN_PCT: u64 = 90;

/// The fewest tokens granted over the last interval that make a measurement.
pub const MIN_SAMPLE: u64 = 10;

impl Aimd {
    /// The limit in force at `now`.
    pub fn effective(&self, l: Learned, now: Nanos) -> u64 {
        if l.value == 0 {
            return self.limit;
        }
        let intervals = now.saturating_sub(l.since) / self.interval.max(1);
        let steps = intervals.saturating_sub(QUIET_INTERVALS - 1);
        let step = (self.limit / 20).max(1);
        l.value
            .saturating_add(steps.saturating_mul(step))
            .min(self.limit)
    }

    /// `l` with its windows moved on to `now`'s.
    fn rolled(&self, mut l: Learned, now: Nanos) -> Learned {
        let i = self.interval.max(1);
        let window = now - now % i;
        // An early clock reading counts in the current window.
        if window <= l.window {
            return l;
        }
        let adjacent = l.window.saturating_add(i) == window;
        (l.prev_granted, l.prev_refused) = match adjacent {
            true => (l.granted, l.refused),
            false => (0, 0),
        };
        (l.window, l.granted, l.refused) = (window, 0, 0);
        l
    }

    /// Tokens granted at `now` (counted for the measured rule).
    pub fn granted(&self, l: Learned, now: Nanos, cost: u64) -> Learned {
        let mut l = self.rolled(l, now);
        l.granted = l.granted.saturating_add(cost);
        l
    }

    /// What upstream accepted over the last interval (granted less refused, the previous
    /// window weighted by its part still inside), when enough was granted to say.
    pub fn measured(&self, l: Learned, now: Nanos) -> Option<u64> {
        let l = self.rolled(l, now);
        let i = u128::from(self.interval.max(1));
        let inside = i - u128::from(now.saturating_sub(l.window)).min(i);
        let part = |prev: u64| (u128::from(prev) * inside / i) as u64;
        let granted = l.granted + part(l.prev_granted);
        let refused = l.refused + part(l.prev_refused);
        (granted >= MIN_SAMPLE.min(self.limit)).then(|| granted.saturating_sub(refused))
    }

    /// A throttle reply at `now` to a message of `cost` tokens: the new state, and
    /// `(old, new)` when the limit was cut.
    pub fn throttled(&self, l: Learned, now: Nanos, cost: u64) -> (Learned, Option<(u64, u64)>) {
        let mut l = self.rolled(l, now);
        l.refused = l.refused.saturating_add(cost);
        let old = self.effective(l, now);
        let floor = self.min.max(1);
        let new = match self.rule {
            Adapt::Multiplicative if l.value != 0 && now < l.cut.saturating_add(self.interval) => {
                None
            }
            Adapt::Multiplicative => Some(old * 7 / 10),
            Adapt::Measured => self
                .measured(l, now)
                .map(|accepted| accepted.saturating_mul(MARGIN_PCT) / 100)
                .filter(|&m| m < old),
        };
        let new = new.map(|n| n.max(floor).min(old));
        (l.value, l.since) = (old, now);
        if let Some(new) = new {
            (l.value, l.cut) = (new, now);
        }
        // Back at the configured limit with nothing cut: nothing learned.
        if l.value == self.limit && new.is_none() && l.cut == 0 {
            l.value = 0;
        }
        (l, new.filter(|&n| n != old).map(|n| (old, n)))
    }
}

#[cfg(test)]
mod tests;
