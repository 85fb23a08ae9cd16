//! Many concurrent connections to the binary, some of them waiting in one tenant's queue:
//! every one answered correctly, and the relay's resident memory measured per connection and
//! per waiting message. Used by `tests/reliability/load.rs` (a CI size) and by the benchmark driver
//! `examples/reliability.rs` (10,000 connections, `bench/scale.sh`).
//!
//! How the waiters are made to wait all at once: the tenant `bulk` has a fixed window of
//! `waiting` tokens per `window`. One message with `waiting` recipients empties it; the
//! `waiting` one-recipient messages that follow all queue until the window refills, then go
//! together. The other connections are opened first and sit idle after EHLO; once the waiters
//! are through, each sends a message of a tenant of its own (no wait).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::config::TestConfig;
use super::http::get;
use super::invariant::{self, settle, ClientLog, Seen};
use super::process::RelayProcess;
use super::relay::sum_metric;
use super::traffic::{self, Leave, Session};
use super::upstream::TestUpstream;

#[derive(Clone, Copy, Debug)]
pub struct LoadSpec {
    /// Connections open at once, waiters included.
    pub connections: usize,
    /// Of which this many wait in one tenant's queue.
    pub waiting: usize,
    /// How long the waiters' window stays empty: more than it takes them all to arrive.
    pub window: Duration,
}

#[derive(Debug)]
pub struct LoadReport {
    pub spec: LoadSpec,
    /// The relay's resident memory: started, with the idle connections open, with the
    /// waiters queued as well, and at the end with every client gone.
    pub rss_start_kib: u64,
    pub rss_idle_kib: u64,
    pub rss_waiting_kib: u64,
    pub rss_end_kib: u64,
    /// The most messages seen waiting at once (`mailsluice_throttle_waiting`).
    pub peak_waiting: usize,
    pub summary: invariant::Summary,
    pub phases: Vec<(&'static str, Duration)>,
}

impl LoadReport {
    pub fn per_idle_connection_bytes(&self) -> u64 {
        let idle = (self.spec.connections - self.spec.waiting) as u64;
        (self.rss_idle_kib.saturating_sub(self.rss_start_kib) * 1024) / idle.max(1)
    }

    /// A waiting connection: its connection and its message in the queue.
    pub fn per_waiting_bytes(&self) -> u64 {
        (self.rss_waiting_kib.saturating_sub(self.rss_idle_kib) * 1024)
            / (self.spec.waiting as u64).max(1)
    }

    pub fn print(&self) {
        let s = &self.spec;
        eprintln!(
            "load: {} connections, {} waiting (peak seen {})",
            s.connections, s.waiting, self.peak_waiting
        );
        eprintln!(
            "  relay RSS: start {} KiB, {} idle connections {} KiB, + {} waiting {} KiB, end {} KiB",
            self.rss_start_kib,
            s.connections - s.waiting,
            self.rss_idle_kib,
            s.waiting,
            self.rss_waiting_kib,
            self.rss_end_kib
        );
        if s.connections > s.waiting {
            eprintln!(
                "  per idle connection {} bytes",
                self.per_idle_connection_bytes()
            );
        }
        eprintln!(
            "  per waiting connection {} bytes",
            self.per_waiting_bytes()
        );
        for (phase, took) in &self.phases {
            eprintln!("  {phase}: {:.2} s", took.as_secs_f64());
        }
        eprintln!("  {:?}", self.summary);
    }
}

/// Raises this process's open-file limit to at least `want` (children inherit it); the
/// limit now in force. Raising the hard limit needs root (CI runs as root).
pub fn raise_nofile(want: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_cur >= want {
            return lim.rlim_cur;
        }
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: lim.rlim_max.max(want),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            let soft = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

fn config(up: &TestUpstream, spec: &LoadSpec) -> String {
    let max = spec.connections + 100;
    let window = spec.window.as_millis();
    let waiting = spec.waiting;
    TestConfig::new()
        .smtp(&format!(
            "max_connections = {max}\nmax_connections_per_ip = {max}\n\
             max_recipients = {waiting}\nidle_timeout_ms = 600000"
        ))
        .upstream(&up.url())
        .then("tls = \"none\"\ntimeout_ms = 60000\npool_size = 16")
        .then(&format!(
            "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"recipients\"\n\
             refill = \"fixed_window\"\nlimit = {waiting}\ninterval_ms = {window}\n\
             max_wait_ms = {max_wait}\nmax_queue = {waiting}\nmax_keys = {keys}\n\
             [admin]\nlisten = \"127.0.0.1:0\"",
            max_wait = window * 3,
            keys = spec.connections * 2,
        ))
        .text()
}

async fn waiting_now(relay: &RelayProcess) -> usize {
    let (status, text) = get(relay.admin.unwrap(), "/metrics").await;
    assert_eq!(status, 200, "{text}");
    sum_metric(&text, "mailsluice_throttle_waiting") as usize
}

/// Runs the scenario against the binary; panics when a client is answered wrongly or the
/// invariant does not hold.
pub async fn run(spec: LoadSpec) -> LoadReport {
    assert!(spec.waiting > 0 && spec.waiting <= spec.connections);
    let want = (spec.connections as u64) * 2 + 1000;
    let nofile = raise_nofile(want);
    assert!(
        nofile >= spec.connections as u64 + 500,
        "open-file limit {nofile} is too low for {} connections (run as root, or ulimit -n)",
        spec.connections
    );
    let up = TestUpstream::start().await;
    let mut relay = RelayProcess::start(&config(&up, &spec), "info,mailsluice::message=warn");
    let addr = relay.addr;
    let log = ClientLog::new();
    let mut phases: Vec<(&'static str, Duration)> = Vec::new();
    let mut clock = Instant::now();
    let mut phase = |name: &'static str| {
        phases.push((name, clock.elapsed()));
        clock = Instant::now();
    };
    let rss_start_kib = relay.rss_kib();

    // The idle connections, a few hundred handshakes at a time.
    let idle_count = spec.connections - spec.waiting;
    let handshakes = Arc::new(Semaphore::new(256));
    let mut opening = tokio::task::JoinSet::new();
    for i in 0..idle_count {
        let handshakes = handshakes.clone();
        opening.spawn(async move {
            let _turn = handshakes.acquire_owned().await.unwrap();
            (i, Session::open(addr).await)
        });
    }
    let mut idle = Vec::with_capacity(idle_count);
    while let Some(opened) = opening.join_next().await {
        let (i, session) = opened.unwrap();
        match session {
            Ok(session) => idle.push((i, session)),
            Err(seen) => panic!("idle connection {i} was not greeted: {seen:?}"),
        }
    }
    phase("open the idle connections");
    let rss_idle_kib = relay.rss_kib();

    // Empty the bulk tenant's window: one message of `waiting` recipients.
    let rcpts: Vec<String> = (0..spec.waiting)
        .map(|i| format!("r{i}@example.net"))
        .collect();
    let opener = traffic::send_to_dot(addr, "opener", "bulk", &rcpts, Leave::Never)
        .await
        .unwrap_or_else(|seen| panic!("opener: {seen:?}"))
        .reply()
        .await;
    log.record("opener", opener.clone());
    assert_eq!(opener.code(), Some(250), "{opener:?}");

    // The waiters.
    let mut waiters = tokio::task::JoinSet::new();
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for i in 0..spec.waiting {
        let (handshakes, log, answered) = (handshakes.clone(), log.clone(), answered.clone());
        waiters.spawn(async move {
            let id = format!("wait-{i}");
            let sent = {
                let _turn = handshakes.acquire_owned().await.unwrap();
                traffic::send_to_dot(addr, &id, "bulk", &[traffic::rcpt()], Leave::Never).await
            };
            let seen = match sent {
                Ok(sent) => sent.reply().await,
                Err(seen) => seen,
            };
            log.record(&id, seen.clone());
            answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            (id, seen)
        });
    }
    // Until all wait at once, or the first is answered (the window refilled first).
    let mut peak_waiting = 0;
    while answered.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        let now = waiting_now(&relay).await;
        peak_waiting = peak_waiting.max(now);
        if now == spec.waiting {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rss_waiting_kib = relay.rss_kib();
    phase("queue the waiters");
    assert_eq!(
        peak_waiting, spec.waiting,
        "every waiter queued before the window refilled (window {:?})",
        spec.window
    );
    while let Some(done) = waiters.join_next().await {
        let (id, seen) = done.unwrap();
        assert_eq!(seen.code(), Some(250), "{id}: {seen:?}");
    }
    phase("deliver the waiters when the window refills");

    // Now every idle connection sends a message of its own tenant.
    let mut senders = tokio::task::JoinSet::new();
    for (i, session) in idle {
        let log = log.clone();
        senders.spawn(async move {
            let id = format!("idle-{i}");
            let tenant = format!("t{i}");
            let seen = match session
                .send_to_dot(&id, &tenant, &[traffic::rcpt()], Leave::Never)
                .await
            {
                Ok(sent) => sent.reply().await,
                Err(seen) => seen,
            };
            log.record(&id, seen.clone());
            (id, seen)
        });
    }
    while let Some(done) = senders.join_next().await {
        let (id, seen) = done.unwrap();
        assert!(matches!(seen, Seen::Reply(250, _)), "{id}: {seen:?}");
    }
    phase("send a message on every idle connection");
    let rss_end_kib = relay.rss_kib();

    relay.signal(libc::SIGTERM);
    let status = relay.wait(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(0));
    settle(&up).await;
    let summary = invariant::assert_holds("load", &log, &up);
    assert_eq!(summary.acknowledged, spec.connections + 1, "{summary:?}");
    LoadReport {
        spec,
        rss_start_kib,
        rss_idle_kib,
        rss_waiting_kib,
        rss_end_kib,
        peak_waiting,
        summary,
        phases,
    }
}
