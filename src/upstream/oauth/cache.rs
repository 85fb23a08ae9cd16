//! The tokens kept: one slot per mailbox (or one for every mailbox), each with its token and
//! a lock held while its token is asked for, so that messages arriving together ask once.
//! Bounded: past [`MAX_SLOTS`] mailboxes, slots not being asked for are forgotten.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::Token;

/// The most mailboxes whose tokens are kept at once.
pub(super) const MAX_SLOTS: usize = 1024;

#[derive(Default)]
pub(super) struct Cache {
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

/// One mailbox's token.
#[derive(Default)]
pub(super) struct Slot {
    token: Mutex<Option<Token>>,
    /// Held while a token is asked for.
    pub fetching: Arc<tokio::sync::Mutex<()>>,
}

impl Cache {
    /// The slot of `key`, made when there is none.
    pub fn slot(&self, key: &str) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = slots.get(key) {
            return Arc::clone(slot);
        }
        if slots.len() >= MAX_SLOTS {
            // Those in use elsewhere (a request under way, a message holding one) stay.
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        let slot = Arc::new(Slot::default());
        slots.insert(key.to_string(), Arc::clone(&slot));
        slot
    }
}

impl Slot {
    pub fn current(&self) -> Option<Token> {
        self.token.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set(&self, token: Token) {
        *self.token.lock().unwrap_or_else(|e| e.into_inner()) = Some(token);
    }

    pub fn clear(&self) {
        *self.token.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}
