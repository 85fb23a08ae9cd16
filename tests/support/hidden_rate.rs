//! An upstream like SES, in memory: its own hidden token bucket, charged per recipient,
//! answering `454 Throttling failure: Maximum sending rate exceeded.` at the final dot when
//! empty, and optionally a daily quota (`454 ... Daily message quota exceeded.`). On tokio's
//! clock, so that a paused-clock test drives the relay and this upstream on one time line.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mailsluice::clock::{Clock, TokioClock};
use mailsluice::message::Envelope;
use mailsluice::throttle::bucket::{Bucket, State, Take};
use mailsluice::upstream::{Accepted, Feedback, ForwardFuture, Forwarder, Outgoing, UpstreamError};
use tokio::time::Instant;

pub const SES_RATE: &str = "Throttling failure: Maximum sending rate exceeded.";
pub const SES_QUOTA: &str = "Throttling failure: Daily message quota exceeded.";

pub struct HiddenRate {
    bucket: Mutex<Bucket>,
    clock: TokioClock,
    state: Mutex<State>,
    /// Messages it may still accept today; `None`: no quota.
    quota: Mutex<Option<u64>>,
    accepted: Mutex<Vec<(Envelope, Vec<u8>, Instant)>>,
    rate_refusals: AtomicU64,
    quota_refusals: AtomicU64,
    /// The next this many messages are refused `454` whatever the bucket holds.
    refuse_next: AtomicU64,
}

impl HiddenRate {
    /// `rate` recipients a second, holding as many (SES: its sending rate is also its burst).
    pub fn new(rate: u64) -> Arc<HiddenRate> {
        Arc::new(HiddenRate {
            bucket: Mutex::new(Bucket::drip(rate, rate, 1_000_000_000)),
            clock: TokioClock::new(),
            state: Mutex::new(State::default()),
            quota: Mutex::new(None),
            accepted: Mutex::new(Vec::new()),
            rate_refusals: AtomicU64::new(0),
            quota_refusals: AtomicU64::new(0),
            refuse_next: AtomicU64::new(0),
        })
    }

    /// Its hidden rate becomes `rate` a second (and its burst), holding what it held.
    pub fn set_rate(&self, rate: u64) {
        let mut bucket = self.bucket.lock().unwrap();
        let mut state = self.state.lock().unwrap();
        let to = Bucket::drip(rate, rate, 1_000_000_000);
        *state = to.converted(&bucket, *state, self.clock.now());
        *bucket = to;
    }

    /// The next `n` messages are refused with a rate `454`, whatever its bucket holds.
    pub fn refuse_next(&self, n: u64) {
        self.refuse_next.store(n, Ordering::SeqCst);
    }

    pub fn set_quota(&self, left: Option<u64>) {
        *self.quota.lock().unwrap() = left;
    }

    /// What it accepted, with when.
    pub fn accepted(&self) -> Vec<(Envelope, Vec<u8>, Instant)> {
        self.accepted.lock().unwrap().clone()
    }

    /// The `454 ... Maximum sending rate exceeded` it answered.
    pub fn rate_refusals(&self) -> u64 {
        self.rate_refusals.load(Ordering::SeqCst)
    }

    pub fn quota_refusals(&self) -> u64 {
        self.quota_refusals.load(Ordering::SeqCst)
    }

    fn verdict(
        &self,
        envelope: &Envelope,
        message: &[u8],
    ) -> Result<Accepted, (u64, &'static str)> {
        let mut quota = self.quota.lock().unwrap();
        if *quota == Some(0) {
            return Err((454, SES_QUOTA));
        }
        let refuse = self
            .refuse_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if refuse.is_ok() {
            return Err((454, SES_RATE));
        }
        let bucket = *self.bucket.lock().unwrap();
        let mut state = self.state.lock().unwrap();
        let cost = envelope.rcpts.len() as u64;
        match bucket.take(*state, self.clock.now(), cost) {
            (Take::Granted, next) => *state = next,
            _ => return Err((454, SES_RATE)),
        }
        if let Some(left) = quota.as_mut() {
            *left -= 1;
        }
        let mut got = self.accepted.lock().unwrap();
        got.push((envelope.clone(), message.to_vec(), Instant::now()));
        Ok(Accepted::new(format!("Ok {}", got.len())))
    }
}

impl Forwarder for HiddenRate {
    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        let (envelope, pieces) = (outgoing.envelope, outgoing.pieces);
        Box::pin(async move {
            self.verdict(envelope, &pieces.concat())
                .map_err(|(code, text)| {
                    let counter = match text {
                        SES_QUOTA => &self.quota_refusals,
                        _ => &self.rate_refusals,
                    };
                    counter.fetch_add(1, Ordering::SeqCst);
                    ses_refusal(code as u16, text)
                })
        })
    }
}

/// SES's refusal of `text` as a forwarder returns it: typed, as an API upstream says it (an
/// SMTP forwarder reads the same from its reply patterns).
pub fn ses_refusal(code: u16, text: &str) -> UpstreamError {
    UpstreamError::Pushback {
        feedback: match text {
            SES_QUOTA => Feedback::Quota,
            _ => Feedback::Rate,
        },
        code,
        enhanced: None,
        text: text.into(),
    }
}
