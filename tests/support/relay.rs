//! Starts mailsluice in-process on 127.0.0.1:0 for a test, and a raw SMTP client to talk to it
//! byte by byte (real clients are used elsewhere; this one lets tests send hostile bytes).

use std::net::SocketAddr;
use std::sync::Arc;

use mailsluice::config::Config;
use mailsluice::inbound::tls::Tls;
use mailsluice::serve::server::Listeners;
use mailsluice::smtp::AsyncStream;
use mailsluice::state::context::Context;
use mailsluice::state::shutdown::{self, ShutdownTrigger};
use mailsluice::upstream::{Forwarder, Upstreams};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::config::TestConfig;
use super::memory::MemoryForwarder;

/// A relay running in this process.
pub struct Relay {
    pub addr: SocketAddr,
    /// Sessions over in-memory streams share this context with the TCP ones.
    ctx: Arc<Context>,
    admin: Arc<mailsluice::admin::endpoint::Admin>,
    /// The implicit-TLS port, when the config has `[smtp.tls]`.
    pub tls_addr: Option<SocketAddr>,
    /// The relay's certificate holder, to call `reload` as SIGHUP does.
    pub tls: Option<Arc<Tls>>,
    /// The relay's throttle, to peek at buckets.
    pub throttle: Arc<mailsluice::throttle::Throttle>,
    /// The relay's current context, to reload it as SIGHUP does.
    pub live: Arc<mailsluice::state::context::Live>,
    trigger: ShutdownTrigger,
    task: JoinHandle<()>,
    /// The in-memory sessions, which `run` does not start: [`Relay::stop`] waits for them too,
    /// so nothing of this relay (its spool's lock among it) outlives the stop.
    memory_sessions: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

/// The config most tests start from ([`TestConfig::new`]): `extra_smtp` added to `[smtp]`, one
/// upstream at `upstream_url` with a 2 s timeout, then `rest` (more of `[upstream]`'s keys, or
/// tables of their own).
pub fn config_text(upstream_url: &str, extra_smtp: &str, rest: &str) -> String {
    TestConfig::new()
        .smtp(extra_smtp)
        .upstream(upstream_url)
        .then("timeout_ms = 2000")
        .then(rest)
        .text()
}

impl Relay {
    /// A relay whose first upstream forwards through `forwarder` (the others, if any, are
    /// built from the config).
    pub async fn start(config: &str, forwarder: Arc<dyn Forwarder>) -> Relay {
        let config = Arc::new(Config::parse(config).expect("test config is valid"));
        let upstreams = Upstreams::with_first(&config, forwarder).expect("upstreams");
        Relay::launch(config, upstreams).await
    }

    /// As [`Relay::start`], listening on `listener` (bound first: on `[::1]`, say).
    pub async fn start_on(
        listener: TcpListener,
        config: &str,
        forwarder: Arc<dyn Forwarder>,
    ) -> Relay {
        let config = Arc::new(Config::parse(config).expect("test config is valid"));
        let upstreams = Upstreams::with_first(&config, forwarder).expect("upstreams");
        Relay::launch_on(listener, config, upstreams).await
    }

    /// A relay forwarding with what its upstream sections build (as the binary does).
    pub async fn start_configured(config: &str) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Relay::start_configured_on(listener, config).await
    }

    /// As [`Relay::start_configured`], listening on `listener` (bound first, so that the
    /// config can name its port).
    pub async fn start_configured_on(listener: TcpListener, config: &str) -> Relay {
        let config = Arc::new(Config::parse(config).expect("test config is valid"));
        let upstreams = Upstreams::from_config(&config).expect("upstreams");
        Relay::launch_on(listener, config, upstreams).await
    }

    /// As [`Relay::start`], checking SNS's posts with `sns` (a local certificate host).
    pub async fn start_with_sns(
        config: &str,
        forwarder: Arc<dyn Forwarder>,
        sns: mailsluice::reputation::sns_verifier::SnsVerifier,
    ) -> Relay {
        let config = Arc::new(Config::parse(config).expect("test config is valid"));
        let upstreams = Upstreams::with_first(&config, forwarder).expect("upstreams");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Relay::launch_with(listener, config, upstreams, Some(Arc::new(sns))).await
    }

    async fn launch(config: Arc<Config>, upstreams: Upstreams) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Relay::launch_on(listener, config, upstreams).await
    }

    async fn launch_on(listener: TcpListener, config: Arc<Config>, upstreams: Upstreams) -> Relay {
        Relay::launch_with(listener, config, upstreams, None).await
    }

    async fn launch_with(
        listener: TcpListener,
        config: Arc<Config>,
        upstreams: Upstreams,
        sns: Option<Arc<mailsluice::reputation::sns_verifier::SnsVerifier>>,
    ) -> Relay {
        let addr = listener.local_addr().unwrap();
        let mut listeners = Listeners::from(vec![listener]);
        let mut tls_addr = None;
        if config.smtp.tls.is_some() {
            let implicit = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tls_addr = Some(implicit.local_addr().unwrap());
            listeners.implicit_tls.push(implicit);
        }
        let (trigger, shutdown) = shutdown::channel();
        // A spool on S3 and SQS in a test is moto's: its credentials, never the machine's.
        let s3 = (config.spool.as_ref()).is_some_and(|s| s.s3().is_some());
        let credentials = s3.then(super::moto::credentials);
        let mut deps = mailsluice::Deps::new(config, upstreams)
            .with_tls()
            .expect("test certificate loads")
            .with_spool_using(credentials)
            .await
            .expect("the test's spool opens");
        if let Some(sns) = sns {
            deps = deps.with_sns(sns);
        }
        let throttle = deps.setup.throttle.clone();
        let live = deps.live.clone();
        let ctx = Arc::new(Context::new(deps.clone()));
        let admin = mailsluice::admin::endpoint::Admin::new(&deps);
        let tls = deps.setup.tls.clone();
        let task = tokio::spawn(mailsluice::run(listeners, deps, shutdown));
        Relay {
            addr,
            ctx,
            admin,
            tls_addr,
            tls,
            throttle,
            live,
            trigger,
            task,
            memory_sessions: Default::default(),
        }
    }

    /// Fires the shutdown and waits for `run` to return, and for the in-memory sessions.
    pub async fn stop(self) {
        self.trigger.trigger();
        self.task.await.unwrap();
        let sessions = std::mem::take(&mut *self.memory_sessions.lock().unwrap());
        // Bounded: a session a test left stuck is not the stop's to wait for.
        for session in sessions {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), session).await;
        }
    }

    /// Whether `run` is still running (it returns only after a shutdown, or on a fatal error).
    pub fn is_running(&self) -> bool {
        !self.task.is_finished()
    }

    pub fn trigger_shutdown(&self) {
        self.trigger.trigger();
    }

    /// Starts the admin endpoint on 127.0.0.1:0 and returns its address.
    pub async fn start_admin(&self) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        self.start_admin_on(listener)
    }

    /// The admin endpoint on `listener` (a wildcard address, say): its address.
    pub fn start_admin_on(&self, listener: TcpListener) -> SocketAddr {
        let addr = listener.local_addr().unwrap();
        let shutdown = self.trigger.subscribe();
        tokio::spawn(mailsluice::admin::endpoint::serve(
            listener,
            self.admin.clone(),
            shutdown,
        ));
        addr
    }

    /// The sum of the samples of a Prometheus metric (`mailsluice_messages_total` adds up
    /// every outcome; `mailsluice_messages_total{outcome="delivered"}` one of them).
    pub fn metric(&self, name: &str) -> f64 {
        // The context in force; the throttle it started with until `run` has installed it.
        let text = match self.live.current() {
            Some(ctx) => self.admin.metrics_text(&ctx),
            None => self.admin.services.metrics.encode(&self.throttle),
        };
        sum_metric(&text, name)
    }

    /// What outlives a reload: the password checks, the SNS verifier, the metrics.
    pub fn services(&self) -> Arc<mailsluice::state::context::Services> {
        self.ctx.services.clone()
    }

    /// The relay's reputation guard, when `[reputation]` is set.
    pub fn reputation(&self) -> Option<Arc<mailsluice::reputation::Reputation>> {
        self.ctx.services.reputation.clone()
    }

    /// Messages that reached their final dot and were answered (or abandoned), so far.
    pub fn messages_done(&self) -> u64 {
        self.metric("mailsluice_messages_total") as u64
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }

    /// A client whose session runs over an in-memory stream instead of TCP: the same session
    /// code, but every byte in flight is visible to tokio, so under a paused clock the runtime
    /// never mistakes a connection in progress for idleness and jumps the clock.
    pub async fn memory_client(&self) -> Client {
        let mut c = self.memory_connect();
        c.greeting().await;
        c
    }

    /// Starts an in-memory session; the greeting is left unread.
    pub fn memory_connect(&self) -> Client {
        let (ours, theirs) = tokio::io::duplex(64 * 1024);
        let peer: SocketAddr = "127.0.0.1:50000".parse().unwrap();
        let shutdown = self.trigger.subscribe();
        let session = tokio::spawn(mailsluice::smtp::serve(
            self.ctx.clone(),
            Box::new(theirs),
            peer,
            shutdown,
            false,
        ));
        let mut sessions = self.memory_sessions.lock().unwrap();
        sessions.retain(|s| !s.is_finished());
        sessions.push(session);
        Client {
            stream: BufReader::new(Box::new(ours)),
        }
    }
}

/// A raw SMTP client, over TCP or TLS.
pub struct Client {
    stream: BufReader<Box<dyn AsyncStream>>,
}

impl Client {
    /// Connects and reads the greeting, which must be `220`.
    pub async fn connect(addr: SocketAddr) -> Client {
        let mut c = Client::connect_raw(addr).await;
        c.greeting().await;
        c
    }

    /// Reads the greeting, which must be `220`.
    pub async fn greeting(&mut self) {
        let (code, text) = self.reply().await;
        assert_eq!(code, 220, "greeting: {text}");
    }

    pub async fn connect_raw(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        // Without it, Nagle holds a small write until the relay ACKs the previous one, which
        // a delayed ACK puts off by tens of real milliseconds: long enough for paused time to
        // jump past a deadline the test means to stay within.
        stream.set_nodelay(true).unwrap();
        Client::over(Box::new(stream))
    }

    pub fn over(stream: Box<dyn AsyncStream>) -> Client {
        Client {
            stream: BufReader::new(Box::new(stream)),
        }
    }

    /// Takes the underlying stream (nothing may be left unread in the buffer), for a TLS
    /// handshake; `over` wraps the result again.
    pub fn into_stream(self) -> Box<dyn AsyncStream> {
        assert!(self.stream.buffer().is_empty(), "bytes left unread");
        self.stream.into_inner()
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).await.unwrap();
    }

    /// Sends without failing when the relay has already closed the connection.
    pub async fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.get_mut().write_all(bytes).await
    }

    /// Reads one reply, joining the lines of a multi-line one with `\n`. `(0, "")` at EOF.
    pub async fn reply(&mut self) -> (u16, String) {
        let mut text = Vec::new();
        loop {
            let mut line = String::new();
            if self.stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return (0, text.join("\n"));
            }
            assert!(line.ends_with("\r\n"), "reply line without CRLF: {line:?}");
            let code: u16 = line[..3].parse().expect("reply code");
            text.push(line[4..].trim_end().to_string());
            if line.as_bytes()[3] == b' ' {
                return (code, text.join("\n"));
            }
        }
    }

    pub async fn cmd(&mut self, line: &str) -> (u16, String) {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.reply().await
    }

    /// EHLO, MAIL, RCPTs, DATA and the message (which must end in CRLF); returns the final reply.
    pub async fn send_mail(&mut self, from: &str, rcpts: &[&str], message: &[u8]) -> (u16, String) {
        let (code, _) = self.cmd("EHLO client.test").await;
        assert_eq!(code, 250);
        let (code, text) = self.cmd(&format!("MAIL FROM:<{from}>")).await;
        if code != 250 {
            return (code, text);
        }
        for rcpt in rcpts {
            let (code, text) = self.cmd(&format!("RCPT TO:<{rcpt}>")).await;
            assert_eq!(code, 250, "RCPT {rcpt}: {text}");
        }
        let (code, text) = self.cmd("DATA").await;
        assert_eq!(code, 354, "{text}");
        self.send(message).await;
        self.send(b".\r\n").await;
        self.reply().await
    }

    /// True when the relay closes the connection after at most a few bytes (a TLS alert, a
    /// last reply), never a session's worth.
    pub async fn reads_to_close(&mut self) -> bool {
        let mut buf = [0u8; 512];
        for _ in 0..16 {
            match self.stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
        false
    }

    /// True when the relay closed the connection (reads EOF).
    pub async fn is_closed(&mut self) -> bool {
        let mut buf = [0u8; 1];
        matches!(self.stream.read(&mut buf).await, Ok(0) | Err(_))
    }
}

/// A relay forwarding over SMTP (lettre) to `upstream_url`, plain (no STARTTLS), with the
/// given extra `[smtp]` keys and extra tables after `[upstream]`.
pub async fn smtp_relay(upstream_url: &str, extra_smtp: &str, rest: &str) -> Relay {
    let text = config_text(upstream_url, extra_smtp, &format!("tls = \"none\"\n{rest}"));
    upstream_relay(&text).await
}

/// A relay on the whole config `text`, forwarding with what its `[upstream]` section builds
/// (as the binary does: SMTP, or a directory).
pub async fn upstream_relay(text: &str) -> Relay {
    Relay::start_configured(text).await
}

/// A relay on [`config_text`] (with `extra_smtp` and `rest`) whose forwarder records what it
/// is given, for tests of the session alone.
pub async fn memory_relay(extra_smtp: &str, rest: &str) -> (Relay, Arc<MemoryForwarder>) {
    let fwd = MemoryForwarder::new();
    let relay = Relay::start(&config_text("file://unused", extra_smtp, rest), fwd.clone()).await;
    (relay, fwd)
}

/// The sum of the samples of `name` in a Prometheus text exposition: lines that start with it
/// followed by a space or, when it has no labels of its own, a `{`.
pub fn sum_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let labels_ok =
                rest.starts_with(' ') || (!name.ends_with('}') && rest.starts_with('{'));
            labels_ok.then(|| l.rsplit(' ').next()?.parse::<f64>().ok())?
        })
        .sum()
}
