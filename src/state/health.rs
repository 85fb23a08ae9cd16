//! Whether this replica's SMTP listeners accept: what readiness needs of it besides its spool
//! (and, when asked, upstream).

use std::sync::atomic::{AtomicBool, Ordering};

/// What readiness depends on besides upstream: whether the SMTP listeners are accepting.
#[derive(Debug, Default)]
pub struct Health {
    listening: AtomicBool,
}

impl Health {
    pub fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::SeqCst);
    }

    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }
}
