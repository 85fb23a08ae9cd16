//! An upstream that answers as SES does over SMTP, `250 Ok <prefix>-<n>` (`n` counting from
//! 0), so that a test can name SES's message id in a bounce or complaint; or refuses every
//! message with the error set (`refuse`). It keeps each message's recipients.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mailsluice::upstream::{Accepted, ForwardFuture, Forwarder, Outgoing, UpstreamError};

pub struct SesLike {
    prefix: &'static str,
    sent: AtomicUsize,
    refuse: Mutex<Option<UpstreamError>>,
    rcpts: Mutex<Vec<Vec<String>>>,
}

impl SesLike {
    /// Message ids `ses-0`, `ses-1`, ...
    pub fn new() -> Arc<SesLike> {
        SesLike::with_prefix("ses")
    }

    /// Message ids `<prefix>-0`, ... (replicas that must not share ids).
    pub fn with_prefix(prefix: &'static str) -> Arc<SesLike> {
        Arc::new(SesLike {
            prefix,
            sent: AtomicUsize::new(0),
            refuse: Mutex::default(),
            rcpts: Mutex::default(),
        })
    }

    /// Refuses every message with `error` from now on (`None`: takes them again).
    pub fn refuse(&self, error: Option<UpstreamError>) {
        *self.refuse.lock().unwrap() = error;
    }

    /// Messages taken so far.
    pub fn sent(&self) -> usize {
        self.sent.load(Ordering::SeqCst)
    }

    /// The recipients of each message taken, in order.
    pub fn rcpts(&self) -> Vec<Vec<String>> {
        self.rcpts.lock().unwrap().clone()
    }
}

impl Forwarder for SesLike {
    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        let envelope = outgoing.envelope;
        Box::pin(async move {
            if let Some(e) = self.refuse.lock().unwrap().clone() {
                return Err(e);
            }
            self.rcpts.lock().unwrap().push(envelope.rcpts.clone());
            let n = self.sent.fetch_add(1, Ordering::SeqCst);
            Ok(Accepted::new(format!("Ok {}-{n}", self.prefix)))
        })
    }
}
