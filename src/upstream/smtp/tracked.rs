//! The body handed to lettre, watched: whether all of it was written decides whether a
//! failure at the end of data is "unavailable" (upstream cannot have the message) or
//! "uncertain" (it may).

use std::sync::atomic::{AtomicBool, Ordering};

/// The body's slices, noting when the last one has been written: lettre asks for the next
/// slice only after writing the one before, and writes the final dot only after the last.
pub(super) struct Tracked<'a, I> {
    pub(super) parts: I,
    pub(super) whole: &'a AtomicBool,
}

impl<'a, I: Iterator<Item = &'a [u8]>> Iterator for Tracked<'_, I> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let next = self.parts.next();
        if next.is_none() {
            self.whole.store(true, Ordering::Relaxed);
        }
        next
    }
}
