//! The guard's state in this process (no `[redis]`): the ledger, the attribution, the feedback
//! ids seen and the suppressions, behind one lock, on the injected clock. Every call answers
//! at once; none fails.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{ReputationFuture, ReputationStore};
use crate::clock::{nanos, Clock};
use crate::config::ReputationConfig;
use crate::redis::RedisUnavailable;
use crate::reputation::attribution::Attribution;
use crate::reputation::events::Event;
use crate::reputation::expiring::{Expiring, Inserted};
use crate::reputation::ledger::{Breach, Change, Counts, Ledger};
use crate::reputation::report::{event_counts, standing_of};
use crate::reputation::suppression::{Suppression, Suppressions};
use crate::reputation::{limits, Applied, Standing};

/// What the lock guards.
struct LocalState {
    ledger: Ledger,
    attribution: Attribution,
    /// Feedback ids applied within the window.
    seen: Expiring<()>,
    suppressions: Suppressions,
    unattributed: u64,
}

pub struct LocalReputation {
    state: Mutex<LocalState>,
    suppress: bool,
    clock: Arc<dyn Clock>,
}

impl LocalReputation {
    pub fn new(config: &ReputationConfig, clock: Arc<dyn Clock>) -> LocalReputation {
        let window = nanos(config.window());
        let tracked = config.max_tracked_messages.get();
        let state = LocalState {
            ledger: Ledger::new(limits(config), config.max_tenants.get()),
            attribution: Attribution::new(tracked, window),
            seen: Expiring::new(tracked, window),
            suppressions: Suppressions::new(
                config.max_suppressed.get(),
                config.suppress_ttl_ms.get().saturating_mul(1_000_000),
            ),
            unattributed: 0,
        };
        LocalReputation {
            state: Mutex::new(state),
            suppress: config.suppress,
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, LocalState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn apply_now(&self, event: &Event, date: String) -> Applied {
        let now = self.clock.now();
        let mut state = self.lock();
        if let Some(feedback) = &event.feedback_id {
            if state.seen.insert(feedback, (), now) == Inserted::Known {
                return Applied::Repeat(event.kind);
            }
        }
        // The relay's own record is what it read under the key's trust rules; a client can
        // write the tag itself (`X-SES-MESSAGE-TAGS`), so the tag only fills in for a message
        // this process did not forward (another replica's) or has forgotten.
        let tenant = (state.attribution.tenant(&event.message_id, now))
            .or_else(|| event.tenant.as_deref().map(Arc::from));
        if self.suppress {
            for rcpt in &event.recipients {
                let s = Suppression {
                    reason: event.kind,
                    date: date.clone(),
                };
                state.suppressions.add(rcpt, s, now);
            }
        }
        let Some(tenant) = tenant else {
            state.unattributed += 1;
            return Applied::Counted {
                kind: event.kind,
                tenant: None,
                change: Change::None,
                breach: None,
            };
        };
        let tenant = state.ledger.add(&tenant, event_counts(event), now);
        let (breach, change) = state.ledger.verdict(&tenant, now);
        Applied::Counted {
            kind: event.kind,
            tenant: Some(tenant),
            change,
            breach,
        }
    }
}

/// An answer ready now, boxed as the trait's.
fn ready<'a, T: Send + 'a>(answer: T) -> ReputationFuture<'a, T> {
    Box::pin(std::future::ready(answer))
}

impl ReputationStore for LocalReputation {
    fn standing<'a>(&'a self, key: &'a str) -> ReputationFuture<'a, (Option<Breach>, Change)> {
        ready(self.lock().ledger.verdict(key, self.clock.now()))
    }

    fn add<'a>(
        &'a self,
        key: &'a str,
        counts: Counts,
        message_id: Option<&'a str>,
    ) -> ReputationFuture<'a, (Option<Breach>, Change)> {
        let now = self.clock.now();
        let mut state = self.lock();
        let held = state.ledger.add(key, counts, now);
        if let Some(id) = message_id {
            state.attribution.record(id, held, now);
        }
        ready((None, Change::None))
    }

    fn suppress<'a>(
        &'a self,
        addresses: &'a [String],
        why: Suppression,
    ) -> ReputationFuture<'a, ()> {
        let now = self.clock.now();
        let mut state = self.lock();
        for address in addresses {
            state.suppressions.add(address, why.clone(), now);
        }
        ready(())
    }

    fn apply<'a>(
        &'a self,
        event: &'a Event,
        date: String,
    ) -> ReputationFuture<'a, Result<Applied, RedisUnavailable>> {
        ready(Ok(self.apply_now(event, date)))
    }

    fn suppressed<'a>(&'a self, address: &'a str) -> ReputationFuture<'a, Option<Suppression>> {
        let now = self.clock.now();
        ready(self.lock().suppressions.get(address, now).cloned())
    }

    fn unsuppress<'a>(
        &'a self,
        address: &'a str,
    ) -> ReputationFuture<'a, Result<bool, RedisUnavailable>> {
        ready(Ok(self.lock().suppressions.remove(address)))
    }

    fn resume<'a>(&'a self, key: &'a str) -> ReputationFuture<'a, Result<bool, RedisUnavailable>> {
        ready(Ok(self.lock().ledger.resume(key)))
    }

    fn standings(&self) -> ReputationFuture<'_, Result<Vec<Standing>, RedisUnavailable>> {
        let now = self.clock.now();
        let standings = (self.lock().ledger.snapshot(now).into_iter())
            .map(|(key, c, breach)| standing_of(key.to_string(), c, breach))
            .collect();
        ready(Ok(standings))
    }

    fn suppressed_count(&self) -> ReputationFuture<'_, Result<usize, RedisUnavailable>> {
        let now = self.clock.now();
        let mut state = self.lock();
        state.suppressions.expire(now);
        ready(Ok(state.suppressions.len()))
    }

    fn paused(&self) -> usize {
        let now = self.clock.now();
        let snapshot = self.lock().ledger.snapshot(now);
        snapshot.iter().filter(|(_, _, b)| b.is_some()).count()
    }

    fn unattributed(&self) -> u64 {
        self.lock().unattributed
    }

    fn tracked(&self) -> Option<usize> {
        Some(self.lock().attribution.len())
    }

    fn is_shared(&self) -> bool {
        false
    }
}
