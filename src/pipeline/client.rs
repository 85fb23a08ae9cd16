//! [`Client`]: what the pipeline needs of whoever waits for a message's verdict. For a live
//! SMTP client that is its connection (has it gone?) and its place in the sessions' gauge; a
//! message with no client waiting (released from a spool) has neither.

use std::future::Future;
use std::sync::Arc;

use crate::observe::activity::Activity;
use crate::state::grace_over::Bell;

/// Whoever waits for the verdict.
pub trait Client: Send {
    /// Completes when the client has gone (closed its connection): a message waiting for
    /// tokens is then abandoned, takes nothing and is not forwarded, so a client that saw a
    /// failure never finds the message delivered too. Never, for a message nobody waits on.
    fn gone(&mut self) -> impl Future<Output = ()> + Send;

    /// Where the message is now (waiting for tokens, with upstream), for the activity gauge.
    fn doing(&mut self, activity: Activity);

    /// Rings when the shutdown's grace is over: the message is then given up (`421`).
    fn grace_over(&self) -> Option<Arc<Bell>>;

    /// Nobody waits on the message (released from a spool): its hold-mode layers let it wait
    /// for its tokens past their `max_wait_ms`, in their queues with the live clients.
    fn patient(&self) -> bool {
        false
    }

    /// Completes when the message may join its layers' queues for its first tokens: at once
    /// for a live client (it joins them as it comes). A held message released beside others
    /// of its key waits for the one released before it to have its tokens, so that a key's
    /// messages take their tokens in the order they were released.
    fn turn(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// The message has its tokens (or needs none): the next of its key may queue for its own.
    fn has_tokens(&mut self) {}
}
