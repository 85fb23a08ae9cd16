//! A test upstream SMTP server: it records exactly what it was given and fails on demand, so
//! tests can check byte-exact delivery and every failure path without a real mail server.
//!
//! ```ignore
//! let up = TestUpstream::start().await;            // listens on 127.0.0.1:<free port>
//! up.set_fault(Fault::reply(Step::Rcpt, 550, "5.1.1 no such user"));
//! up.set_fault(Fault::None);                       // changeable while running
//! let got = up.wait_for(1).await;                  // accepted messages, in order
//! up.set_hidden_rate(Some(10));                    // SES: 454 past 10 recipients a second
//! up.set_max_connections(Some(2));                 // SES: 421 past 2 connections
//! ```
//!
//! Use it on a real clock: `wait_for` gives up (panics) after 30 s of tokio time.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::upstream_session::accept_loop;
use mailsluice::clock::{Clock, TokioClock};
use mailsluice::throttle::bucket::{Bucket, State, Take};

/// The points of a transaction where a fault can be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Greeting,
    Ehlo,
    Mail,
    Rcpt,
    Data,
    /// The reply to the final `.` of the message.
    EndOfData,
}

/// Every step, for tables of faults.
pub const ALL_STEPS: [Step; 6] = [
    Step::Greeting,
    Step::Ehlo,
    Step::Mail,
    Step::Rcpt,
    Step::Data,
    Step::EndOfData,
];

/// What goes wrong. One fault applies to every connection until it is changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    #[default]
    None,
    /// Accept the TCP connection and close it at once, before any greeting.
    CloseOnConnect,
    /// Answer `code text` at `step` instead of the positive reply. At `Greeting` the
    /// connection is closed after it; at `EndOfData` the message is not recorded.
    Reply { step: Step, code: u16, text: String },
    /// After `354`, read one line of the message, then close the connection.
    DropMidData,
    /// Read the whole message to its final `.`, then close the connection without a reply
    /// (the message is not recorded): the relay cannot know whether it arrived.
    DropAfterDot,
    /// Wait `delay` before answering at `step` (then answer normally, if anyone is left).
    /// At `EndOfData` the message is then recorded even if the client gave up, as a real
    /// server would: the ambiguity a relay has to live with after the final dot.
    Stall { step: Step, delay: Duration },
}

impl Fault {
    /// Whether it acts on a connection (at connect, greeting or EHLO) rather than on one
    /// transaction (MAIL to the final reply).
    pub fn on_connection(&self) -> bool {
        match self {
            Fault::CloseOnConnect => true,
            Fault::Reply { step, .. } | Fault::Stall { step, .. } => {
                matches!(step, Step::Greeting | Step::Ehlo)
            }
            Fault::None | Fault::DropMidData | Fault::DropAfterDot => false,
        }
    }

    pub fn reply(step: Step, code: u16, text: &str) -> Fault {
        Fault::Reply {
            step,
            code,
            text: text.into(),
        }
    }

    pub fn stall(step: Step, delay: Duration) -> Fault {
        Fault::Stall { step, delay }
    }
}

/// One accepted message.
#[derive(Clone, Debug)]
pub struct Received {
    /// The reverse-path between `<` and `>`; empty for the null sender.
    pub from: String,
    /// MAIL parameters as sent, e.g. `BODY=8BITMIME`, `SMTPUTF8`.
    pub mail_params: Vec<String>,
    pub rcpts: Vec<String>,
    /// The message after dot-unstuffing, up to and including the CRLF before the final `.`.
    pub data: Vec<u8>,
    /// When the final `.` arrived.
    pub at: Instant,
    /// Which connection carried it (1 for the first accepted connection).
    pub conn: usize,
    /// The user that authenticated on that connection, if any.
    pub auth: Option<String>,
}

/// One connection or transaction in `one_in` gets the next fault of its kind, in turn.
#[derive(Default)]
pub(super) struct Mix {
    pub one_in: usize,
    pub connection: Vec<Fault>,
    pub transaction: Vec<Fault>,
    pub connections: usize,
    pub transactions: usize,
}

/// Whether a bearer token is good for logging in as a user (`TokenEndpoint::checker`).
pub type TokenCheck = Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// State shared by the listener, the connections and the test.
pub(super) struct Shared {
    pub fault: Mutex<Fault>,
    pub mix: Mutex<Option<Mix>>,
    pub extensions: Mutex<Vec<String>>,
    pub credentials: Mutex<Option<(String, String)>>,
    pub messages: Mutex<Vec<Received>>,
    pub commands: Mutex<Vec<String>>,
    pub count_tx: watch::Sender<usize>,
    /// Bumped to make every connection close when it next waits for a command.
    pub kick_tx: watch::Sender<(u64, Option<String>)>,
    pub open_tx: watch::Sender<usize>,
    pub accepted: Mutex<usize>,
    /// Like SES: past this many open connections, `421 ... Too many concurrent SMTP
    /// connections` at the greeting (counted in `crowded`).
    pub max_open: Mutex<Option<usize>>,
    pub crowded: Mutex<usize>,
    /// Like SES: a hidden bucket charged per recipient at the final dot; empty, `454
    /// Throttling failure: Maximum sending rate exceeded.` (counted in `rate_refusals`).
    pub hidden: Mutex<Option<(Bucket, State)>>,
    pub rate_refusals: Mutex<usize>,
    /// `AUTH XOAUTH2` only, a token taken when this says it is good for the user.
    pub xoauth2: Mutex<Option<TokenCheck>>,
    /// XOAUTH2 logins refused.
    pub auth_refusals: Mutex<usize>,
    pub clock: TokioClock,
    /// What pipelining tests set and observe (see [`Extra`]).
    pub extra: Mutex<Extra>,
}

/// Knobs and observations for pipelining tests.
#[derive(Default)]
pub(super) struct Extra {
    /// Per connection, each "flight": the command lines that arrived together, in one read
    /// of the socket (the first found nothing buffered). A message's data shows as `<data>`, its
    /// final dot as `.`.
    pub flights: Vec<(usize, Vec<String>)>,
    /// RCPTs to these addresses get this reply (`"550 5.1.1 no such user"`).
    pub refused_rcpts: Vec<(String, String)>,
    /// Answer DATA with `354` even when no recipient was accepted, as RFC 2920 lets a server
    /// do; the data then gets `554` and is kept in `unaddressed`.
    pub data_without_rcpts: bool,
    pub unaddressed: Vec<Vec<u8>>,
}

impl Extra {
    /// Notes a line read: `fresh` when the read found nothing buffered (a new flight).
    pub fn arrived(&mut self, conn: usize, fresh: bool, line: &str) {
        let last = self.flights.iter_mut().rev().find(|(c, _)| *c == conn);
        match last {
            Some((_, flight)) if !fresh => flight.push(line.to_string()),
            _ => self.flights.push((conn, vec![line.to_string()])),
        }
    }
}

impl Shared {
    pub fn fault(&self) -> Fault {
        self.fault.lock().unwrap().clone()
    }

    /// With a mix set, the fault of a new connection (`connection`) or transaction; `None`
    /// without one (then `fault()`, the one set, applies).
    pub fn draw(&self, connection: bool) -> Option<Fault> {
        let mut mix = self.mix.lock().unwrap();
        let mix = mix.as_mut()?;
        let (n, faults) = match connection {
            true => (&mut mix.connections, &mix.connection),
            false => (&mut mix.transactions, &mix.transaction),
        };
        *n += 1;
        if faults.is_empty() || !n.is_multiple_of(mix.one_in) {
            return Some(Fault::None);
        }
        Some(faults[(*n / mix.one_in) % faults.len()].clone())
    }

    /// Whether the hidden bucket (if any) grants `cost` recipients now; a refusal is counted.
    pub fn hidden_allows(&self, cost: u64) -> bool {
        let mut hidden = self.hidden.lock().unwrap();
        let Some((bucket, state)) = hidden.as_mut() else {
            return true;
        };
        match bucket.take(*state, self.clock.now(), cost) {
            (Take::Granted, next) => {
                *state = next;
                true
            }
            _ => {
                *self.rate_refusals.lock().unwrap() += 1;
                false
            }
        }
    }

    pub fn record(&self, message: Received) {
        let mut messages = self.messages.lock().unwrap();
        messages.push(message);
        self.count_tx.send_replace(messages.len());
    }
}

pub struct TestUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    listener: Mutex<Option<JoinHandle<()>>>,
    /// While it does not listen: its port, bound and not listening, so that connections are
    /// refused and no other listener of the test process (tests run side by side) gets the
    /// port and answers in its place.
    held: Mutex<Option<TcpSocket>>,
}

pub const DEFAULT_EXTENSIONS: &[&str] = &[
    "PIPELINING",
    "8BITMIME",
    "SMTPUTF8",
    "SIZE 104857600",
    "ENHANCEDSTATUSCODES",
];

impl TestUpstream {
    pub async fn start() -> TestUpstream {
        TestUpstream::start_at("127.0.0.1:0".parse().unwrap()).await
    }

    /// Listens on `addr` (any of 127.0.0.0/8, port 0 for a free one): several upstreams on
    /// one port at 127.0.0.2, 127.0.0.3, ... stand for the MX hosts of `mx://`.
    pub async fn start_at(addr: SocketAddr) -> TestUpstream {
        let listener = listen(addr);
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            fault: Mutex::new(Fault::None),
            mix: Mutex::new(None),
            extensions: Mutex::new(DEFAULT_EXTENSIONS.iter().map(|s| s.to_string()).collect()),
            credentials: Mutex::new(None),
            messages: Mutex::new(Vec::new()),
            commands: Mutex::new(Vec::new()),
            count_tx: watch::Sender::new(0),
            kick_tx: watch::Sender::new((0, None)),
            open_tx: watch::Sender::new(0),
            accepted: Mutex::new(0),
            max_open: Mutex::new(None),
            crowded: Mutex::new(0),
            hidden: Mutex::new(None),
            rate_refusals: Mutex::new(0),
            xoauth2: Mutex::new(None),
            auth_refusals: Mutex::new(0),
            clock: TokioClock::new(),
            extra: Mutex::new(Extra::default()),
        });
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        TestUpstream {
            addr,
            shared,
            listener: Mutex::new(Some(task)),
            held: Mutex::new(None),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `smtp://127.0.0.1:<port>`, ready for `[upstream] url`.
    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    pub fn set_fault(&self, fault: Fault) {
        *self.shared.fault.lock().unwrap() = fault;
    }

    /// From now on, one connection in `one_in` and one transaction in `one_in` fails, taking
    /// the faults of its kind (see [`Fault::on_connection`]) from `faults` in turn; the others
    /// go well. Replaces `set_fault`.
    pub fn set_fault_mix(&self, one_in: usize, faults: Vec<Fault>) {
        assert!(one_in > 0);
        let (connection, transaction) = faults.into_iter().partition(Fault::on_connection);
        *self.shared.mix.lock().unwrap() = Some(Mix {
            one_in,
            connection,
            transaction,
            ..Mix::default()
        });
    }

    /// The keywords advertised after the EHLO greeting line (default: `DEFAULT_EXTENSIONS`).
    pub fn set_extensions(&self, extensions: &[&str]) {
        *self.shared.extensions.lock().unwrap() =
            extensions.iter().map(|s| s.to_string()).collect();
    }

    /// From now on, advertise the default extensions but PIPELINING: each command then waits
    /// for its reply.
    pub fn without_pipelining(&self) {
        let without: Vec<&str> = (DEFAULT_EXTENSIONS.iter().copied())
            .filter(|e| *e != "PIPELINING")
            .collect();
        self.set_extensions(&without);
    }

    /// From now on, advertise `AUTH PLAIN` and refuse MAIL (`530`) until a client
    /// authenticates with these credentials.
    pub fn require_auth(&self, user: &str, password: &str) {
        *self.shared.credentials.lock().unwrap() = Some((user.into(), password.into()));
    }

    /// From now on, advertise `AUTH XOAUTH2` alone and refuse MAIL (`530`) until a client logs
    /// in with it: the SASL string exactly as Microsoft and Google document it, its token one
    /// `check` says is good for its user. A refused token gets a `334` with the error in JSON,
    /// then, after the client's empty line, `535`, as Gmail answers.
    pub fn require_xoauth2(&self, check: TokenCheck) {
        *self.shared.xoauth2.lock().unwrap() = Some(check);
    }

    /// XOAUTH2 logins refused so far.
    pub fn auth_refusals(&self) -> usize {
        *self.shared.auth_refusals.lock().unwrap()
    }

    /// Stops listening: new connections are refused by the OS; open ones carry on. The port
    /// is held before the listener closes, so no other socket can take it in between.
    pub async fn stop_listening(&self) {
        *self.held.lock().unwrap() = Some(hold(self.addr));
        let task = self.listener.lock().unwrap().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
    }

    /// Listens again on the same address after `stop_listening` (upstream back up).
    pub async fn resume_listening(&self) {
        let listener = listen(self.addr);
        self.held.lock().unwrap().take();
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&self.shared)));
        *self.listener.lock().unwrap() = Some(task);
    }

    /// Every accepted message so far, in order.
    pub fn messages(&self) -> Vec<Received> {
        self.shared.messages.lock().unwrap().clone()
    }

    /// The `Message-ID` of every accepted message, in order (`""` for one without).
    pub fn message_ids(&self) -> Vec<String> {
        (self.shared.messages.lock().unwrap().iter())
            .map(|m| message_id(&m.data))
            .collect()
    }

    /// Every command line received (without CRLF), over all connections, in order.
    pub fn commands(&self) -> Vec<String> {
        self.shared.commands.lock().unwrap().clone()
    }

    /// TCP connections accepted so far (including those closed by `CloseOnConnect`).
    pub fn connections(&self) -> usize {
        *self.shared.accepted.lock().unwrap()
    }

    /// From now on, a connection past `max` open ones is greeted with SES's `421 4.4.5 Too
    /// many concurrent SMTP connections` and closed (`None`: no bound).
    pub fn set_max_connections(&self, max: Option<usize>) {
        *self.shared.max_open.lock().unwrap() = max;
    }

    /// From now on, SES's sending rate: `rate` recipients a second, holding as many, checked at
    /// the final dot (`None`: no rate).
    pub fn set_hidden_rate(&self, rate: Option<u64>) {
        let bucket = rate.map(|r| (Bucket::drip(r, r, 1_000_000_000), State::default()));
        *self.shared.hidden.lock().unwrap() = bucket;
    }

    /// The `454 ... Maximum sending rate exceeded` answered so far.
    pub fn rate_refusals(&self) -> usize {
        *self.shared.rate_refusals.lock().unwrap()
    }

    /// Connections refused for the bound of `set_max_connections`.
    pub fn crowded(&self) -> usize {
        *self.shared.crowded.lock().unwrap()
    }

    /// Per connection, the command lines grouped by the socket read they arrived in (see
    /// [`Extra::flights`]). A pipelining client's MAIL, RCPTs and DATA come as one.
    pub fn flights(&self) -> Vec<(usize, Vec<String>)> {
        self.shared.extra.lock().unwrap().flights.clone()
    }

    /// From now on, RCPT to `address` is answered `reply` (e.g. `"550 5.1.1 no such user"`).
    pub fn refuse_rcpt(&self, address: &str, reply: &str) {
        let mut extra = self.shared.extra.lock().unwrap();
        extra.refused_rcpts.push((address.into(), reply.into()));
    }

    /// Whether DATA gets `354` even with no accepted recipient (see [`Extra`]).
    pub fn set_data_without_rcpts(&self, on: bool) {
        self.shared.extra.lock().unwrap().data_without_rcpts = on;
    }

    /// The data of transactions that had no recipient (with `set_data_without_rcpts`).
    pub fn unaddressed(&self) -> Vec<Vec<u8>> {
        self.shared.extra.lock().unwrap().unaddressed.clone()
    }

    /// Connections currently open.
    pub fn open_connections(&self) -> usize {
        *self.shared.open_tx.borrow()
    }

    /// Waits until at least `n` messages were accepted and returns them all.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let mut rx = self.shared.count_tx.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|c| *c >= n));
        if waited.await.is_err() {
            panic!(
                "test upstream: waited 30 s for {n} messages, got {}",
                self.messages().len()
            );
        }
        self.messages()
    }

    /// Tells every open connection to close as `close_idle_connections` does, without
    /// waiting for them to go (under load, new ones keep coming).
    pub fn kick_connections(&self, notice: Option<&str>) {
        self.shared
            .kick_tx
            .send_modify(|(n, text)| (*n, *text) = (*n + 1, notice.map(str::to_string)));
    }

    /// Closes every connection as an idle-timeout would: at once for those waiting for a
    /// command, after their transaction for the others. `notice` (e.g.
    /// `"421 4.4.2 idle timeout"`) is written first when given. Returns once all are closed.
    pub async fn close_idle_connections(&self, notice: Option<&str>) {
        self.kick_connections(notice);
        let mut open = self.shared.open_tx.subscribe();
        let closed = tokio::time::timeout(Duration::from_secs(30), open.wait_for(|n| *n == 0));
        assert!(
            closed.await.is_ok(),
            "test upstream: connections stayed open"
        );
    }
}

impl Drop for TestUpstream {
    fn drop(&mut self) {
        if let Some(task) = self.listener.lock().unwrap().take() {
            task.abort();
        }
    }
}

/// A socket that may share its port with the other socket of a `TestUpstream` (the listener
/// and the holder overlap while one replaces the other) and with connections the listener
/// accepted.
fn shareable(addr: SocketAddr) -> TcpSocket {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket.set_reuseport(true).expect("SO_REUSEPORT");
    socket.bind(addr).expect("binding the port");
    socket
}

fn listen(addr: SocketAddr) -> TcpListener {
    shareable(addr).listen(1024).expect("listen")
}

/// A port bound and not listening: connections to it are refused, and while it is held no
/// other socket binding port 0 can get it.
fn hold(addr: SocketAddr) -> TcpSocket {
    shareable(addr)
}

/// An address nothing listens on, for "connection refused": held (bound, not listening)
/// as long as the value lives.
pub struct Refusing(TcpSocket);

impl Refusing {
    pub fn addr(&self) -> SocketAddr {
        self.0.local_addr().expect("bound")
    }
}

pub fn refusing_addr() -> Refusing {
    Refusing(hold("127.0.0.1:0".parse().unwrap()))
}

/// The value of a message's `Message-ID:` field (its header section only), trimmed.
pub fn message_id(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    (text.split("\r\n\r\n").next().unwrap_or_default().lines())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("message-id")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default()
}
