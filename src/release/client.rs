//! The pipeline's [`Client`] for a held message: nobody waits on it. It is never gone (a
//! message released from the spool is not abandoned), it waits past its hold-mode layers'
//! `max_wait_ms`, it takes its tokens in its key's order (`turns`), and the shutdown's grace
//! ends its journey as it ends a session's.

use std::sync::Arc;

use crate::observe::activity::Activity;
use crate::pipeline::Client;
use crate::state::grace_over::Bell;

use super::turns::Turn;

/// The client of a released message.
pub struct Unattended {
    pub grace_over: Arc<Bell>,
    /// Its place in its key's order.
    pub turn: Turn,
}

impl Client for Unattended {
    async fn gone(&mut self) {
        std::future::pending().await
    }

    /// Releases are not sessions: the sessions' gauge does not count them.
    fn doing(&mut self, _activity: Activity) {}

    fn grace_over(&self) -> Option<Arc<Bell>> {
        Some(self.grace_over.clone())
    }

    fn patient(&self) -> bool {
        true
    }

    async fn turn(&mut self) {
        self.turn.wait().await
    }

    fn has_tokens(&mut self) {
        self.turn.pass()
    }
}
