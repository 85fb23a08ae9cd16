//! Failed AUTH attempts per client address, and the lockout they lead to. The table is
//! bounded: at most `MAX_TRACKED` addresses, dropping the stalest entry when full. Addresses
//! are counted as for the connection bound (IPv6 by /64), so a client cannot pick a fresh
//! address for every guess.
//!
//! An attempt counts from when its check starts ([`AuthFailures::begin`]), not when it ends:
//! a check in flight counts as a failure until it succeeds, so guesses sent in parallel are
//! refused once `max_failures` of them are in flight or failed, and cost no hash.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::inbound::connection_limit::client_key;

/// Addresses whose failed AUTH attempts are remembered at once.
pub const MAX_TRACKED: usize = 10_000;

/// The lockout rule: `max_failures` failed AUTHs within `window` lock the address out for
/// `lockout`. A success does not clear the count: with one valid account an attacker could
/// otherwise reset it between guesses at other accounts.
#[derive(Debug, Clone, Copy)]
pub struct LockoutRule {
    pub max_failures: u32,
    pub window: Duration,
    pub lockout: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    window_start: Instant,
    count: u32,
    locked_until: Option<Instant>,
    /// Attempts whose check has started and not ended.
    pending: u32,
}

impl Failures {
    fn fresh(now: Instant, pending: u32) -> Failures {
        Failures {
            window_start: now,
            count: 0,
            locked_until: None,
            pending,
        }
    }

    fn locked(&self, now: Instant) -> bool {
        self.locked_until.is_some_and(|until| now < until)
    }

    /// Whether the entry still matters at `now` (a counting window or a lockout running).
    fn live(&self, now: Instant, rule: &LockoutRule) -> bool {
        self.pending > 0 || self.locked(now) || now < self.window_start + rule.window
    }
}

/// Failed AUTH attempts per client address, bounded by `MAX_TRACKED`.
pub struct AuthFailures {
    rule: LockoutRule,
    capacity: usize,
    table: Mutex<HashMap<IpAddr, Failures>>,
}

impl AuthFailures {
    pub fn new(rule: LockoutRule) -> AuthFailures {
        AuthFailures::with_capacity(rule, MAX_TRACKED)
    }

    pub fn with_capacity(rule: LockoutRule, capacity: usize) -> AuthFailures {
        AuthFailures {
            rule,
            capacity: capacity.max(1),
            table: Mutex::new(HashMap::new()),
        }
    }

    pub fn is_locked(&self, ip: IpAddr, now: Instant) -> bool {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table.get(&client_key(ip)).is_some_and(|f| f.locked(now))
    }

    /// Starts an attempt from `ip`: `None` (refused) when the address is locked out, or when
    /// its failures and the attempts in flight already reach `max_failures`.
    pub fn begin(self: &Arc<Self>, ip: IpAddr, now: Instant) -> Option<Attempt> {
        let key = client_key(ip);
        let rule = self.rule;
        let mut table = self.lock();
        if !table.contains_key(&key) && table.len() >= self.capacity {
            make_room(&mut table, now, &rule, self.capacity);
        }
        let entry = table.entry(key).or_insert(Failures::fresh(now, 0));
        if entry.locked(now) {
            return None;
        }
        if now >= entry.window_start + rule.window {
            *entry = Failures::fresh(now, entry.pending);
        }
        if entry.count.saturating_add(entry.pending) >= rule.max_failures {
            return None;
        }
        entry.pending += 1;
        Some(Attempt {
            table: self.clone(),
            key,
            open: true,
        })
    }

    /// Ends an attempt of `key`; a failure is counted. True when the address is (now)
    /// locked out.
    fn end(&self, key: IpAddr, failed: bool, now: Instant) -> bool {
        let rule = self.rule;
        let mut table = self.lock();
        let Some(entry) = table.get_mut(&key) else {
            return false;
        };
        entry.pending = entry.pending.saturating_sub(1);
        if entry.locked(now) {
            return true;
        }
        if !failed {
            return false;
        }
        if now >= entry.window_start + rule.window {
            *entry = Failures::fresh(now, entry.pending);
        }
        entry.count += 1;
        if entry.count >= rule.max_failures {
            entry.locked_until = Some(now + rule.lockout);
            // The next window starts when the lockout ends.
            entry.window_start = now + rule.lockout;
            entry.count = 0;
            return true;
        }
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Failures>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One AUTH attempt in flight, counted against its address until it ends: as a failure
/// ([`Attempt::failed`]), or not at all when it succeeded or was dropped unanswered.
pub struct Attempt {
    table: Arc<AuthFailures>,
    key: IpAddr,
    open: bool,
}

impl Attempt {
    /// Counts the failure; true when the address is (now) locked out.
    pub fn failed(mut self, now: Instant) -> bool {
        self.open = false;
        self.table.end(self.key, true, now)
    }

    /// The attempt succeeded: it no longer counts.
    pub fn succeeded(self) {}
}

impl Drop for Attempt {
    fn drop(&mut self) {
        if self.open {
            self.table.end(self.key, false, Instant::now());
        }
    }
}

/// Drops the entries that no longer matter; while still full, the one whose counting
/// started longest ago (a lockout about to end goes before one just begun).
fn make_room(
    table: &mut HashMap<IpAddr, Failures>,
    now: Instant,
    rule: &LockoutRule,
    capacity: usize,
) {
    table.retain(|_, f| f.live(now, rule));
    while table.len() >= capacity {
        let Some(oldest) = table
            .iter()
            .min_by_key(|(_, f)| f.locked_until.unwrap_or(f.window_start))
            .map(|(k, _)| *k)
        else {
            return;
        };
        table.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// One attempt from `a` that fails; true when refused or locked out.
    fn fail(f: &Arc<AuthFailures>, a: IpAddr, now: Instant) -> bool {
        f.begin(a, now).is_none_or(|attempt| attempt.failed(now))
    }

    fn rule() -> LockoutRule {
        LockoutRule {
            max_failures: 3,
            window: Duration::from_secs(60),
            lockout: Duration::from_secs(300),
        }
    }

    #[test]
    fn lockout_after_max_failures_within_the_window_then_expires() {
        let f = Arc::new(AuthFailures::new(rule()));
        let t0 = Instant::now();
        let a = ip("198.51.100.1");
        assert!(!fail(&f, a, t0));
        assert!(!fail(&f, a, t0 + Duration::from_secs(1)));
        assert!(fail(&f, a, t0 + Duration::from_secs(2)));
        assert!(f.is_locked(a, t0 + Duration::from_secs(3)));
        assert!(!f.is_locked(ip("198.51.100.2"), t0));
        let after = t0 + Duration::from_secs(303);
        assert!(!f.is_locked(a, after));
        assert!(!fail(&f, a, after), "a fresh window after the lockout");
    }

    #[test]
    fn failures_spread_beyond_the_window_do_not_lock() {
        let f = Arc::new(AuthFailures::new(rule()));
        let t0 = Instant::now();
        let a = ip("198.51.100.1");
        // Two in each 60 s window, never three.
        for i in 0..20u64 {
            assert!(!fail(&f, a, t0 + Duration::from_secs(i * 31)));
        }
    }

    #[test]
    fn table_is_bounded() {
        let f = Arc::new(AuthFailures::with_capacity(rule(), 4));
        let t0 = Instant::now();
        for i in 0..100u32 {
            let a = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            fail(&f, a, t0 + Duration::from_millis(u64::from(i)));
            assert!(f.len() <= 4);
        }
    }

    #[test]
    fn attempts_in_flight_count_from_their_start() {
        let f = Arc::new(AuthFailures::new(rule()));
        let t0 = Instant::now();
        let a = ip("198.51.100.1");
        let started: Vec<Attempt> = (0..3).map(|_| f.begin(a, t0).unwrap()).collect();
        assert!(
            f.begin(a, t0).is_none(),
            "three in flight: the fourth is refused"
        );
        assert!(
            f.begin(ip("198.51.100.2"), t0).is_some(),
            "other addresses go on"
        );
        let mut started = started.into_iter();
        // A success no longer counts; a dropped attempt neither.
        started.next().unwrap().succeeded();
        drop(started.next());
        let again = f.begin(a, t0).unwrap();
        assert!(!started.next().unwrap().failed(t0));
        assert!(!again.failed(t0), "two failures");
        assert!(fail(&f, a, t0), "the third locks");
        assert!(f.is_locked(a, t0));
        assert!(!f.is_locked(a, t0 + Duration::from_secs(301)));
    }
}
