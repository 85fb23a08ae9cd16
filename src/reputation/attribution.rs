//! Which tenant sent a message: SES's message id (from upstream's `250`) -> the tenant's key,
//! kept for the window, at most `max` messages (past it the oldest is forgotten: its events
//! then count as unattributed).
//!
//! Cost per message, about 200 bytes: the id (SES's are 60 bytes) twice, in the map and in the
//! expiry order, with their 16-byte pointers; the time twice (8 bytes each); the tenant's key,
//! shared by all of its messages (a 16-byte pointer); the map's own slack. With 1,000,000
//! messages a window (the default bound) that is about 200 MB.

use std::sync::Arc;

use crate::clock::Nanos;

use super::expiring::{Expiring, Inserted};

pub struct Attribution {
    messages: Expiring<Arc<str>>,
}

impl Attribution {
    pub fn new(max: usize, window: Nanos) -> Attribution {
        Attribution {
            messages: Expiring::new(max, window),
        }
    }

    /// Remembers that `tenant` sent `message_id`; true when an older message was forgotten
    /// for it (the bound was reached).
    pub fn record(&mut self, message_id: &str, tenant: Arc<str>, now: Nanos) -> bool {
        self.messages.insert(message_id, tenant, now) == Inserted::Evicted
    }

    /// The tenant that sent `message_id` within the window.
    pub fn tenant(&self, message_id: &str, now: Nanos) -> Option<Arc<str>> {
        self.messages.get(message_id, now).cloned()
    }

    pub fn len(&self) -> usize {
        self.messages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_its_bound_the_oldest_message_is_forgotten() {
        let mut a = Attribution::new(2, 1000);
        let acme: Arc<str> = "acme".into();
        assert!(!a.record("m1", acme.clone(), 0));
        assert!(!a.record("m2", acme.clone(), 1));
        assert!(a.record("m3", "beta".into(), 2));
        assert_eq!(a.len(), 2);
        assert_eq!(a.tenant("m1", 2), None, "unattributed now");
        assert_eq!(a.tenant("m3", 2).as_deref(), Some("beta"));
        assert_eq!(a.tenant("m3", 1002), None, "past the window");
    }
}
