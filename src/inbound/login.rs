//! One password login, as SMTP AUTH and the admin endpoint both take them: the address's
//! lockout asked first (a locked-out address costs no hash), the check run in the bounded
//! checker, a failure counted and answered only after the failure delay. Each listener has
//! its own [`Logins`]: its own check slots and its own lockout table, so guessing at one
//! never slows or locks out the other.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::auth_lockout::{AuthFailures, LockoutRule};
use super::password::Verifier;

/// The password checks and failed attempts of one listener.
#[derive(Clone)]
pub struct Logins {
    /// Checks its passwords, a bounded number at once.
    pub checks: Arc<Verifier>,
    /// Its failed attempts per client address, for the lockout.
    pub failures: Arc<AuthFailures>,
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Login<T> {
    /// The check said yes: what it found (the user).
    Accepted(T),
    /// The check said no; answered after the failure delay.
    Refused,
    /// The address is locked out: refused before any check, or by failures of attempts made
    /// in parallel (whose answer then tells nothing), or (`now`) by this very failure.
    LockedOut { now: bool },
}

impl Logins {
    /// At most `parallel_checks` checks hashing at once, and `rule`'s lockout.
    pub fn new(parallel_checks: usize, rule: LockoutRule) -> Logins {
        Logins {
            checks: Verifier::new(parallel_checks),
            failures: Arc::new(AuthFailures::new(rule)),
        }
    }

    /// Whether `ip` is locked out now.
    pub fn locked_out(&self, ip: IpAddr) -> bool {
        self.failures.is_locked(ip, Instant::now())
    }

    /// One attempt from `ip`: `check` (a password check through [`Logins::checks`]) runs
    /// only when the address may try; a failure is counted, then answered after `delay`.
    pub async fn attempt<T>(
        &self,
        ip: IpAddr,
        delay: Duration,
        check: impl Future<Output = Option<T>>,
    ) -> Login<T> {
        let Some(attempt) = self.failures.begin(ip, Instant::now()) else {
            return Login::LockedOut { now: false };
        };
        let verified = check.await;
        // Attempts started in parallel before a lockout are answered as locked out when they
        // end, right password or not, so parallel guessing learns nothing past the threshold.
        if self.locked_out(ip) {
            return Login::LockedOut { now: false };
        }
        match verified {
            Some(found) => {
                attempt.succeeded();
                Login::Accepted(found)
            }
            None => {
                let locked = attempt.failed(Instant::now());
                tokio::time::sleep(delay).await;
                match locked {
                    true => Login::LockedOut { now: true },
                    false => Login::Refused,
                }
            }
        }
    }
}
