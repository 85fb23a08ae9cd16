//! The effective limit of an adaptive layer (AIMD), pure: `(state, now) -> limit`.
//!
//! Why: a provider's real rate (SES's sending rate, a smarthost's policy) is often lower than
//! configured, and it says so only by refusing (`454 Throttling failure`). Each such reply cuts
//! the limit to 70 % (at most once per interval, so one burst of refusals is one cut, never
//! below the floor); after ten quiet intervals the limit climbs back by 5 % of the configured
//! limit per interval. Time is an argument, so tests and the Redis script compute the same.
//!
//! The state is three integers, so a shared store can hold it as it holds a bucket:
//! `value` (the limit at `since`), `since` (the last throttle reply), `cut` (the last cut).

use super::clock::Nanos;

/// The numbers of one adaptive layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aimd {
    /// The configured limit: the ceiling.
    pub limit: u64,
    /// The floor (`min_limit`).
    pub min: u64,
    pub interval: Nanos,
}

/// What a layer has learned; `Default` is "nothing yet": the configured limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Learned {
    /// The limit at `since`; 0 means the configured limit.
    pub value: u64,
    pub since: Nanos,
    /// When the limit was last cut; 0 with `value == 0`: never.
    pub cut: Nanos,
}

/// Intervals without a throttle reply before the limit climbs again.
pub const QUIET_INTERVALS: u64 = 10;

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

    /// A throttle reply at `now`: the new state, and `(old, new)` when the limit was cut.
    pub fn throttled(&self, l: Learned, now: Nanos) -> (Learned, Option<(u64, u64)>) {
        let old = self.effective(l, now);
        let may_cut = l.value == 0 || now >= l.cut.saturating_add(self.interval);
        if !may_cut {
            return (
                Learned {
                    value: old,
                    since: now,
                    cut: l.cut,
                },
                None,
            );
        }
        let new = (old * 7 / 10).max(self.min.max(1)).min(old);
        let learned = Learned {
            value: new,
            since: now,
            cut: now,
        };
        (learned, (new != old).then_some((old, new)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;
    const A: Aimd = Aimd {
        limit: 20,
        min: 2,
        interval: S,
    };

    #[test]
    fn a_reply_cuts_once_per_interval_down_to_the_floor() {
        let (l, cut) = A.throttled(Learned::default(), 5 * S);
        assert_eq!(cut, Some((20, 14)));
        let (l, cut) = A.throttled(l, 5 * S + S / 2);
        assert_eq!((cut, A.effective(l, 5 * S + S / 2)), (None, 14));
        let (mut l, cut) = A.throttled(l, 6 * S);
        assert_eq!(cut, Some((14, 9)));
        for i in 7..20 {
            l = A.throttled(l, i * S).0;
        }
        assert_eq!(A.effective(l, 19 * S), 2);
    }

    #[test]
    fn quiet_intervals_bring_the_limit_back_slowly_to_the_configured_one() {
        let (l, _) = A.throttled(Learned::default(), 0);
        assert_eq!(A.effective(l, 9 * S + S / 2), 14);
        assert_eq!(A.effective(l, 10 * S), 15);
        assert_eq!(A.effective(l, 12 * S), 17);
        assert_eq!(A.effective(l, 100 * S), 20);
        // A later reply cuts from the recovered value.
        assert_eq!(A.throttled(l, 12 * S).1, Some((17, 11)));
    }
}
