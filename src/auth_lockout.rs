//! Failed AUTH attempts per client address, and the lockout they lead to. The table is
//! bounded: at most `MAX_TRACKED` addresses, dropping the stalest entry when full. Addresses
//! are counted as for the connection bound (IPv6 by /64), so a client cannot pick a fresh
//! address for every guess.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::connection_limit::client_key;

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
}

impl Failures {
    fn locked(&self, now: Instant) -> bool {
        self.locked_until.is_some_and(|until| now < until)
    }

    /// Whether the entry still matters at `now` (a counting window or a lockout running).
    fn live(&self, now: Instant, rule: &LockoutRule) -> bool {
        self.locked(now) || now < self.window_start + rule.window
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

    /// Counts a failure; true when the address is (now) locked out.
    pub fn record_failure(&self, ip: IpAddr, now: Instant) -> bool {
        let key = client_key(ip);
        let rule = self.rule;
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if !table.contains_key(&key) && table.len() >= self.capacity {
            make_room(&mut table, now, &rule, self.capacity);
        }
        let entry = table.entry(key).or_insert(Failures {
            window_start: now,
            count: 0,
            locked_until: None,
        });
        if entry.locked(now) {
            return true;
        }
        if !entry.live(now, &rule) {
            *entry = Failures {
                window_start: now,
                count: 0,
                locked_until: None,
            };
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

    pub fn len(&self) -> usize {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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

    fn rule() -> LockoutRule {
        LockoutRule {
            max_failures: 3,
            window: Duration::from_secs(60),
            lockout: Duration::from_secs(300),
        }
    }

    #[test]
    fn lockout_after_max_failures_within_the_window_then_expires() {
        let f = AuthFailures::new(rule());
        let t0 = Instant::now();
        let a = ip("198.51.100.1");
        assert!(!f.record_failure(a, t0));
        assert!(!f.record_failure(a, t0 + Duration::from_secs(1)));
        assert!(f.record_failure(a, t0 + Duration::from_secs(2)));
        assert!(f.is_locked(a, t0 + Duration::from_secs(3)));
        assert!(!f.is_locked(ip("198.51.100.2"), t0));
        let after = t0 + Duration::from_secs(303);
        assert!(!f.is_locked(a, after));
        assert!(
            !f.record_failure(a, after),
            "a fresh window after the lockout"
        );
    }

    #[test]
    fn failures_spread_beyond_the_window_do_not_lock() {
        let f = AuthFailures::new(rule());
        let t0 = Instant::now();
        let a = ip("198.51.100.1");
        // Two in each 60 s window, never three.
        for i in 0..20u64 {
            assert!(!f.record_failure(a, t0 + Duration::from_secs(i * 31)));
        }
    }

    #[test]
    fn table_is_bounded() {
        let f = AuthFailures::with_capacity(rule(), 4);
        let t0 = Instant::now();
        for i in 0..100u32 {
            let a = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            f.record_failure(a, t0 + Duration::from_millis(u64::from(i)));
            assert!(f.len() <= 4);
        }
    }
}
