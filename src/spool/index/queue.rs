//! One key's messages in the spool's memory: all of them by arrival, the ones whose time has
//! come, the ones being written or released, and how many may be released at once.

use std::collections::{BTreeMap, BTreeSet};

use super::Entry;

/// One key's messages.
pub(super) struct Queue {
    /// Every message of the key (held, being written, being released), by its place in
    /// arrival order (`seq`).
    pub entries: BTreeMap<u64, Entry>,
    /// The held ones whose time has come, by arrival: the first goes next.
    pub ready: BTreeSet<u64>,
    /// The ones being written: a later message does not go before the first of them is on
    /// stable storage (a key's messages leave in the order they came).
    pub writing: BTreeSet<u64>,
    /// The ones with upstream (or waiting for their tokens) now.
    pub releasing: usize,
    /// How many may be released at once: 1 until the releaser learns the route's
    /// concurrency (its upstream's `pool_size`) from an attempt.
    pub width: usize,
    /// The place it is ranked under among the keys with messages ready (its first ready
    /// one's), if it is.
    pub ranked: Option<u64>,
}

impl Queue {
    pub fn new() -> Queue {
        Queue {
            entries: BTreeMap::new(),
            ready: BTreeSet::new(),
            writing: BTreeSet::new(),
            releasing: 0,
            width: 1,
            ranked: None,
        }
    }

    /// The place of the message that goes next, if the key may release one more now: its
    /// first ready message, unless as many as its width are out already or an earlier one
    /// is still being written.
    pub fn next_to_go(&self) -> Option<u64> {
        if self.releasing >= self.width {
            return None;
        }
        let first = *self.ready.first()?;
        match self.writing.first() {
            Some(&writing) if writing < first => None,
            _ => Some(first),
        }
    }
}
