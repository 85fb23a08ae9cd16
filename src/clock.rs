//! Monotonic time, as integer nanoseconds, injected: the throttle's buckets and queues and the
//! reputation guard's window all read it, never the system clock.
//!
//! Why a trait: bucket math must never read a clock itself (it takes `now` as an argument), and
//! the queues and the window must be testable without sleeping. [`TokioClock`] follows
//! `tokio::time`, so a test runtime with paused time drives it exactly; [`FakeClock`] is moved
//! by hand for pure tests.
//! Why integers: a float clock drifts over days; nanoseconds in a `u64` last 584 years.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Monotonic nanoseconds since the clock's origin (its creation, for the clocks of this module).
pub type Nanos = u64;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Converts a duration to [`Nanos`], saturating (a duration of centuries means "never").
pub fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A monotonic clock that no change of the time of day moves.
pub trait Clock: Send + Sync {
    /// The current monotonic instant.
    fn now(&self) -> Nanos;

    /// Unix seconds at the monotonic instant `at`, rounded up, so that a reported reset time is
    /// never earlier than the real one. Used only for display (`Peek::reset`).
    fn unix_secs_at(&self, at: Nanos) -> u64;

    /// Unix milliseconds at the monotonic instant `at`, rounded down: a held message's age,
    /// which must survive a restart, is kept in wall-clock time.
    fn unix_ms_at(&self, at: Nanos) -> u64 {
        self.unix_secs_at(at).saturating_mul(1000)
    }

    /// Unix seconds now, rounded up.
    fn unix_now_secs(&self) -> u64 {
        self.unix_secs_at(self.now())
    }

    /// The tokio instant at which `at` falls, for `tokio::time::sleep_until`. The default maps
    /// through the current offset, which is exact for any clock that runs at tokio's pace.
    fn deadline(&self, at: Nanos) -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_nanos(at.saturating_sub(self.now()))
    }
}

fn ceil_secs(unix_nanos: u128) -> u64 {
    let secs = unix_nanos.div_ceil(u128::from(NANOS_PER_SEC));
    u64::try_from(secs).unwrap_or(u64::MAX)
}

/// The real clock: `tokio::time::Instant` relative to the clock's creation, so that tokio's
/// paused time (`start_paused = true`) drives it in tests.
#[derive(Debug, Clone)]
pub struct TokioClock {
    origin: tokio::time::Instant,
    /// Unix nanoseconds at `origin`: turns a monotonic instant into a wall-clock time.
    unix_origin: u128,
}

impl TokioClock {
    pub fn new() -> TokioClock {
        let unix_origin = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        TokioClock {
            origin: tokio::time::Instant::now(),
            unix_origin,
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Nanos {
        nanos(tokio::time::Instant::now().saturating_duration_since(self.origin))
    }

    fn unix_secs_at(&self, at: Nanos) -> u64 {
        ceil_secs(self.unix_origin + u128::from(at))
    }

    fn unix_ms_at(&self, at: Nanos) -> u64 {
        let ms = (self.unix_origin + u128::from(at)) / 1_000_000;
        u64::try_from(ms).unwrap_or(u64::MAX)
    }

    fn deadline(&self, at: Nanos) -> tokio::time::Instant {
        self.origin + Duration::from_nanos(at)
    }
}

/// A clock moved by hand, for tests of the pure parts. Timers (`deadline`) follow tokio's clock
/// from the current offset, so a queue driven by a fake clock only wakes when the test moves
/// both; prefer [`TokioClock`] with paused time for queue tests.
#[derive(Debug, Default)]
pub struct FakeClock {
    now: AtomicU64,
    unix_origin_secs: u64,
}

impl FakeClock {
    /// A clock at instant 0 whose wall-clock origin is `unix_origin_secs`.
    pub fn new(unix_origin_secs: u64) -> FakeClock {
        FakeClock {
            now: AtomicU64::new(0),
            unix_origin_secs,
        }
    }

    pub fn set(&self, at: Nanos) {
        self.now.store(at, Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(nanos(by), Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }

    fn unix_secs_at(&self, at: Nanos) -> u64 {
        let origin = u128::from(self.unix_origin_secs) * u128::from(NANOS_PER_SEC);
        ceil_secs(origin + u128::from(at))
    }
}

/// `YYYY-MM-DD` (UTC) of Unix seconds (Howard Hinnant's days-to-civil).
pub fn date_of(unix_secs: u64) -> String {
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339, UTC) of Unix seconds.
pub fn rfc3339(unix_secs: u64) -> String {
    let s = unix_secs % 86_400;
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    format!("{}T{h:02}:{m:02}:{s:02}Z", date_of(unix_secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_by_hand_and_rounds_unix_seconds_up() {
        let c = FakeClock::new(1_000);
        assert_eq!(c.now(), 0);
        assert_eq!(c.unix_now_secs(), 1_000);
        c.advance(Duration::from_millis(1));
        assert_eq!(c.now(), 1_000_000);
        assert_eq!(c.unix_now_secs(), 1_001);
        c.set(3 * NANOS_PER_SEC);
        assert_eq!(c.unix_now_secs(), 1_003);
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time_exactly() {
        let c = TokioClock::new();
        assert_eq!(c.now(), 0);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(c.now(), 1_500_000_000);
        assert_eq!(c.deadline(2_000_000_000), c.origin + Duration::from_secs(2));
        let ms = c.unix_ms_at(c.now());
        assert_eq!(
            c.unix_ms_at(c.now() + 2_000_000),
            ms + 2,
            "follows the clock"
        );
    }
}
