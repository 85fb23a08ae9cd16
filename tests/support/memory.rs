//! A forwarder that keeps what it is given, for tests of the session alone (the SMTP
//! upstream over TCP is tested with the test upstream server), and what tests read in the
//! messages kept (here or upstream).

use std::sync::{Arc, Mutex};

use mailsluice::message::Envelope;
use mailsluice::upstream::{Accepted, ForwardFuture, Forwarder, Outgoing, UpstreamError};

#[derive(Default)]
pub struct MemoryForwarder {
    got: Mutex<Vec<(Envelope, Vec<u8>)>>,
    /// When each message was forwarded, on tokio's clock (paused in throttle tests).
    at: Mutex<Vec<tokio::time::Instant>>,
    fail_with: Mutex<Option<UpstreamError>>,
    /// How long upstream takes to answer a message it has (zero unless set).
    answer_after: Mutex<std::time::Duration>,
}

impl MemoryForwarder {
    pub fn new() -> Arc<MemoryForwarder> {
        Arc::new(MemoryForwarder::default())
    }

    pub fn messages(&self) -> Vec<(Envelope, Vec<u8>)> {
        self.got.lock().unwrap().clone()
    }

    pub fn times(&self) -> Vec<tokio::time::Instant> {
        self.at.lock().unwrap().clone()
    }

    /// Every later forward fails with `error` (None: succeed again).
    pub fn fail_with(&self, error: Option<UpstreamError>) {
        *self.fail_with.lock().unwrap() = error;
    }

    /// Every later message is recorded at once (its final dot went) and answered `delay`
    /// later.
    pub fn answer_after(&self, delay: std::time::Duration) {
        *self.answer_after.lock().unwrap() = delay;
    }
}

impl Forwarder for MemoryForwarder {
    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        let (envelope, pieces) = (outgoing.envelope, outgoing.pieces);
        Box::pin(async move {
            if let Some(e) = self.fail_with.lock().unwrap().clone() {
                return Err(e);
            }
            let n = {
                let mut got = self.got.lock().unwrap();
                got.push((envelope.clone(), pieces.concat()));
                self.at.lock().unwrap().push(tokio::time::Instant::now());
                got.len()
            };
            let delay = *self.answer_after.lock().unwrap();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Ok(Accepted::new(format!("Ok queued as mem-{n}")))
        })
    }
}

/// The text of a message's `Subject:` line (the first line that starts with it).
pub fn subject_of(message: &[u8]) -> String {
    let text = String::from_utf8_lossy(message);
    text.lines()
        .find_map(|l| l.strip_prefix("Subject: "))
        .unwrap()
        .to_string()
}

/// The message as the client sent it: the relay's `Received:` header removed.
pub fn without_received(message: &[u8]) -> &[u8] {
    assert!(
        message.starts_with(b"Received: "),
        "no Received header first"
    );
    // The header's folded lines start with a tab; the first line that does not is the client's.
    let mut pos = 0;
    loop {
        let end = pos
            + message[pos..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .unwrap()
            + 2;
        pos = end;
        if message.get(pos) != Some(&b'\t') {
            return &message[pos..];
        }
    }
}
