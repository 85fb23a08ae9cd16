//! What the spool's tests share: a hold-mode layer, a spool section, a forwarder that refuses
//! some recipients for good, and a client sending one message in a task of its own.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mailsluice::message::Envelope;
use mailsluice::upstream::{Accepted, ForwardFuture, Forwarder, Outgoing, UpstreamError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::support::relay::Relay;

/// A `mode = "hold"` layer keyed by `X-Tenant`, costing 1 a message.
pub fn hold_layer(limit: u64, burst: u64, max_wait_ms: u64, extra: &str) -> String {
    format!(
        "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
         limit = {limit}\ninterval_ms = 1000\nburst = {burst}\nmode = \"hold\"\n\
         max_wait_ms = {max_wait_ms}\n{extra}\n"
    )
}

/// `[spool]` in `dir`, no free-space bound (the test machine's disk is not the point),
/// retries after 1 s doubling to 5 s, and `extra`.
pub fn spool_section(dir: &Path, extra: &str) -> String {
    format!(
        "[spool]\ndir = \"{}\"\nmin_free_bytes = 0\nretry_min_ms = 1000\nretry_max_ms = 5000\n{extra}\n",
        dir.display()
    )
}

pub fn message(tenant: &str, subject: &str) -> Vec<u8> {
    format!("X-Tenant: {tenant}\r\nSubject: {subject}\r\n\r\nbody of {subject}\r\n").into_bytes()
}

/// One message from `from` to `rcpt` on a new in-memory connection, in a task of its own;
/// its final reply and when it came (tokio's clock).
pub fn send_as(
    relay: &Relay,
    from: &str,
    rcpt: &str,
    msg: Vec<u8>,
) -> JoinHandle<(u16, String, Instant)> {
    let mut c = relay.memory_connect();
    let (from, rcpt) = (from.to_string(), rcpt.to_string());
    tokio::spawn(async move {
        c.greeting().await;
        let (code, text) = c.send_mail(&from, &[&rcpt], &msg).await;
        let _ = c.cmd("QUIT").await;
        (code, text, Instant::now())
    })
}

pub fn send(relay: &Relay, tenant: &str, subject: &str) -> JoinHandle<(u16, String, Instant)> {
    send_as(
        relay,
        "app@acme.example",
        "user@example.net",
        message(tenant, subject),
    )
}

/// Over every window between two grants, no more than `burst + limit * t / 1 s`.
pub fn assert_within_rate(times: &[Instant], burst: u64, limit: u64) {
    let sec = Duration::from_secs(1).as_nanos();
    for i in 0..times.len() {
        for j in i..times.len() {
            let n = (j - i + 1) as u128;
            let t = (times[j] - times[i]).as_nanos();
            assert!(
                n <= u128::from(burst) || (n - u128::from(burst)) * sec <= u128::from(limit) * t,
                "{n} grants within {t} ns (from #{i} to #{j})"
            );
        }
    }
}

/// Lets paused time run in steps of `step` until `cond` holds (at most `limit` of it).
pub async fn run_until(what: &str, step: Duration, limit: Duration, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() <= limit, "never happened: {what}");
        tokio::time::sleep(step).await;
    }
}

/// Upstream that refuses for good (`550 5.1.1`) every message to a recipient of `refused`,
/// for now (`451 4.2.0`) every message to one of `deferred`, and keeps the others.
#[derive(Default)]
pub struct Refusing {
    pub refused: Mutex<Vec<String>>,
    pub deferred: Mutex<Vec<String>>,
    /// The next this many messages get SES's quota reply (the upstream pauses).
    pub quota: Mutex<usize>,
    pub got: Mutex<Vec<(Envelope, Vec<u8>)>>,
    /// When each kept message came (tokio's clock).
    pub at: Mutex<Vec<Instant>>,
    pub tried: Mutex<usize>,
    /// The subject of each message tried, in turn.
    pub tried_subjects: Mutex<Vec<String>>,
    /// Upstream cannot be reached: every message fails before anything is sent.
    pub down: Mutex<bool>,
}

impl Refusing {
    pub fn new(refused: &[&str]) -> Arc<Refusing> {
        let r = Refusing::default();
        *r.refused.lock().unwrap() = refused.iter().map(|s| s.to_string()).collect();
        Arc::new(r)
    }

    pub fn messages(&self) -> Vec<(Envelope, Vec<u8>)> {
        self.got.lock().unwrap().clone()
    }
}

impl Forwarder for Refusing {
    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        Box::pin(async move {
            *self.tried.lock().unwrap() += 1;
            let tried = subject(&outgoing.pieces.concat());
            self.tried_subjects.lock().unwrap().push(tried);
            if *self.down.lock().unwrap() {
                return Err(UpstreamError::Unavailable("connection refused".into()));
            }
            let quota = *self.quota.lock().unwrap();
            if let Some(left) = quota.checked_sub(1) {
                *self.quota.lock().unwrap() = left;
                return Err(UpstreamError::Pushback {
                    feedback: mailsluice::upstream::Feedback::Quota,
                    code: 454,
                    enhanced: Some("4.7.0".into()),
                    text: "Throttling failure: Daily message quota exceeded.".into(),
                });
            }
            let deferred = self.deferred.lock().unwrap().clone();
            if outgoing.envelope.rcpts.iter().any(|r| deferred.contains(r)) {
                return Err(UpstreamError::Rejected {
                    code: 451,
                    enhanced: Some("4.2.0".into()),
                    text: "try again later".into(),
                });
            }
            let refused = self.refused.lock().unwrap().clone();
            if outgoing.envelope.rcpts.iter().any(|r| refused.contains(r)) {
                return Err(UpstreamError::Rejected {
                    code: 550,
                    enhanced: Some("5.1.1".into()),
                    text: "mailbox unavailable".into(),
                });
            }
            let mut got = self.got.lock().unwrap();
            got.push((outgoing.envelope.clone(), outgoing.pieces.concat()));
            self.at.lock().unwrap().push(Instant::now());
            Ok(Accepted::new(format!("Ok up-{}", got.len())))
        })
    }
}

/// The text of a message's `Subject:` line.
pub fn subject(message: &[u8]) -> String {
    let text = String::from_utf8_lossy(message);
    (text.lines())
        .find_map(|l| l.strip_prefix("Subject: "))
        .unwrap_or_default()
        .to_string()
}

/// Files in the spool's `sub` directory.
pub fn files(dir: &Path, sub: &str) -> usize {
    std::fs::read_dir(dir.join(sub)).map_or(0, |d| d.count())
}
