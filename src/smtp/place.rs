//! The session's place in the running relay: what it is doing (the metrics'
//! `sessions{activity}`), the relay's shutdown signal and the bell that rings when its grace
//! is over, and when the session last answered a message (a shutdown soon after waits a
//! moment for the client's `QUIT`: `session.rs`).

use std::sync::Arc;

use tokio::time::Instant;

use crate::observe::activity::{Activity, Doing};
use crate::state::context::Context;
use crate::state::grace_over::Bell;
use crate::state::shutdown::Shutdown;

pub struct Place {
    shutdown: Shutdown,
    /// Where this session is counted in the metrics' `sessions{activity}`.
    doing: Doing,
    /// Rings when the shutdown's grace is over (none outside a running relay).
    grace_over: Option<Arc<Bell>>,
    /// When the last command, a message's, was answered.
    message_answered: Option<Instant>,
}

impl Place {
    pub fn new(ctx: &Context, shutdown: Shutdown) -> Place {
        Place {
            shutdown,
            doing: ctx.services.metrics.activities().start(),
            grace_over: ctx.services.live.upgrade().map(|live| live.grace_bell()),
            message_answered: None,
        }
    }

    /// The relay's shutdown signal, for a read from the client to stop at.
    pub fn shutdown(&mut self) -> &mut Shutdown {
        &mut self.shutdown
    }

    pub fn doing(&mut self, activity: Activity) {
        self.doing.set(activity);
    }

    pub fn grace_over(&self) -> Option<Arc<Bell>> {
        self.grace_over.clone()
    }

    /// A command was read: it, not a message, is the last thing the session answers.
    pub fn command_read(&mut self) {
        self.message_answered = None;
    }

    pub fn message_answered(&mut self) {
        self.message_answered = Some(Instant::now());
    }

    /// When the last command answered was a message's, when it was answered.
    pub fn last_message_answered(&self) -> Option<Instant> {
        self.message_answered
    }
}
