//! Connections to one SMTP upstream, kept open between messages.
//!
//! Every connection that fails or times out is dropped, never parked: one cancelled by a
//! timeout is out of step, and the next message would read the late replies of the previous
//! one and could take a stale `250` for its own. So is one where upstream sent more than it
//! was asked (found when it is parked, and again when it is taken for a message). A semaphore bounds the connections open at
//! once, parked or busy.
//!
//! - `connector`: opening one ready connection, its refusals classified.
//! - `reconnect`: when a connection is retired between messages.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::client::Client;
use super::{Feedback, UpstreamError};

mod connector;
mod reconnect;

pub(super) use connector::{ConnectError, Connector, Login, Security};
use reconnect::Age;
pub(super) use reconnect::Reconnect;

/// A parked connection older than this is closed rather than reused: servers drop idle
/// clients after a while (Postfix after 300 s), and reusing one that is almost surely dead
/// costs a failed attempt before the retry.
const IDLE_LIMIT: Duration = Duration::from_secs(60);

/// How long the pool holds one connection fewer after upstream said it has too many from us:
/// ten of the default throttle interval (1 s), long enough for upstream's count to drop.
pub(super) const SHRINK_FOR: Duration = Duration::from_secs(10);

/// Why a readiness probe found upstream unreachable.
#[derive(Debug, thiserror::Error)]
pub(super) enum ProbeError {
    /// Connecting (and logging in, with credentials) was refused or failed.
    #[error("{0}")]
    Connect(UpstreamError),
    #[error("{0}")]
    Io(std::io::Error),
    /// The first line upstream sent, when it is no `220` greeting.
    #[error("greeting was {0:?}")]
    Greeting(String),
    #[error("timed out")]
    TimedOut,
}

/// The right to hold one open connection. Freeing it wakes a message waiting for a
/// connection, which could not otherwise tell a freed slot from a parked connection.
struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    freed: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.freed.notify_one();
    }
}

/// A connection checked out for one transaction. Dropping it closes the socket and frees its
/// slot: that is what happens to every connection whose state is not known to be clean.
pub(super) struct Lease {
    /// Boxed: a lease and its parked form move several times a message (checkout, the
    /// forwarder's steps, checkin).
    pub conn: Box<Client>,
    /// It served an earlier message, so upstream may have closed it while it sat idle.
    pub reused: bool,
    slot: Slot,
    age: Age,
}

struct Parked {
    conn: Box<Client>,
    since: Instant,
    slot: Slot,
    age: Age,
}

pub(super) struct Pool {
    pub(super) connector: Connector,
    timeout: Duration,
    /// Last in, first out: the most recently used connection is the most likely alive.
    idle: Mutex<Vec<Parked>>,
    /// One permit per open connection, parked or busy: `pool_size` bounds both.
    slots: Arc<Semaphore>,
    /// Signalled when a connection is parked or a slot is freed.
    available: Arc<Notify>,
    /// Slots held back after upstream's "too many connections" (see [`Pool::withhold`]).
    withheld: Arc<AtomicUsize>,
    size: usize,
    reconnect: Reconnect,
    /// How many times upstream said so, for the metrics.
    pub(super) shrinks: AtomicU64,
}

impl Pool {
    /// Connects and reads the greeting, then hangs up: reachability for `/readyz`, on a
    /// connection of its own so that it never disturbs a pooled one. With credentials
    /// configured, it goes as far as logging in (and says QUIT), so that credentials upstream
    /// refuses (or a token that cannot be had) make the upstream unready.
    pub async fn probe(&self) -> Result<(), ProbeError> {
        use tokio::io::AsyncBufReadExt;
        if !matches!(self.connector.login, Login::None) {
            return match self.connector.open(self.timeout).await {
                Ok(mut conn) => {
                    let _ = tokio::time::timeout(self.timeout, conn.quit()).await;
                    Ok(())
                }
                Err(ConnectError::TimedOut) => Err(ProbeError::TimedOut),
                Err(e) => Err(ProbeError::Connect(UpstreamError::from(e))),
            };
        }
        let (host, port) = (self.connector.host.as_str(), self.connector.port);
        let greeting = async {
            let tcp = tokio::net::TcpStream::connect((host, port)).await?;
            let mut line = String::new();
            tokio::io::BufReader::new(tcp).read_line(&mut line).await?;
            Ok::<String, std::io::Error>(line)
        };
        match tokio::time::timeout(self.timeout, greeting).await {
            Ok(Ok(line)) if line.starts_with("220") => Ok(()),
            Ok(Ok(line)) => Err(ProbeError::Greeting(line.trim_end().to_string())),
            Ok(Err(e)) => Err(ProbeError::Io(e)),
            Err(_) => Err(ProbeError::TimedOut),
        }
    }

    pub fn new(connector: Connector, size: usize, timeout: Duration) -> Pool {
        Pool {
            connector,
            timeout,
            idle: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(size)),
            available: Arc::new(Notify::new()),
            withheld: Arc::new(AtomicUsize::new(0)),
            size,
            reconnect: Reconnect::default(),
            shrinks: AtomicU64::new(0),
        }
    }

    /// The pool with connections retired after `reconnect`'s bounds.
    pub fn with_reconnect(mut self, reconnect: Reconnect) -> Pool {
        self.reconnect = reconnect;
        self
    }

    /// Upstream has too many connections from us: close `lease`'s and keep its slot empty
    /// for [`SHRINK_FOR`], so the pool holds one fewer (never fewer than one).
    pub fn close_shrinking(&self, lease: Lease) {
        let Lease { conn, slot, .. } = lease;
        drop(conn);
        self.withhold(slot);
    }

    fn withhold(&self, slot: Slot) {
        self.shrinks.fetch_add(1, Ordering::Relaxed);
        let held = self.withheld.fetch_add(1, Ordering::Relaxed) + 1;
        if held >= self.size {
            self.withheld.fetch_sub(1, Ordering::Relaxed);
            return; // the last slot stays
        }
        tracing::info!(
            target: "mailsluice::upstream",
            reason = "connections",
            pool_bound = self.size - held,
            "upstream.throttled"
        );
        let withheld = Arc::clone(&self.withheld);
        tokio::spawn(async move {
            tokio::time::sleep(SHRINK_FOR).await;
            withheld.fetch_sub(1, Ordering::Relaxed);
            drop(slot);
        });
    }

    /// A parked connection if one is fresh enough, else a new one in a free slot, else waits
    /// (up to the timeout) for whichever of the two comes first.
    pub async fn checkout(&self) -> Result<Lease, ConnectError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let available = self.available.notified();
            tokio::pin!(available);
            available.as_mut().enable();
            if let Some(parked) = self.pop_idle() {
                return Ok(Lease {
                    conn: parked.conn,
                    reused: true,
                    slot: parked.slot,
                    age: parked.age,
                });
            }
            if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
                let slot = Slot {
                    permit: Some(permit),
                    freed: Arc::clone(&self.available),
                };
                return self.open(slot).await;
            }
            if tokio::time::timeout_at(deadline, available).await.is_err() {
                return Err(ConnectError::PoolBusy);
            }
        }
    }

    /// Replaces a connection found dead with a new one, keeping its slot so that a retry
    /// never queues behind other messages.
    pub async fn reconnect(&self, lease: Lease) -> Result<Lease, ConnectError> {
        let Lease { conn, slot, .. } = lease;
        drop(conn);
        self.open(slot).await
    }

    /// Parks a connection whose last transaction ended cleanly, for the next message; one
    /// past its reconnect bounds says QUIT instead (between messages, never within one). One
    /// with upstream's bytes unread (an extra line after its reply) is closed: they would be
    /// read as the next message's replies.
    pub fn checkin(&self, mut lease: Lease) {
        if !lease.conn.is_idle_in_step() {
            return;
        }
        let age = Age {
            transactions: lease.age.transactions + 1,
            ..lease.age
        };
        if self.reconnect.due(&age) {
            return self.retire(lease.conn, lease.slot);
        }
        let parked = Parked {
            conn: lease.conn,
            since: Instant::now(),
            slot: lease.slot,
            age,
        };
        self.idle.lock().expect("pool lock").push(parked);
        self.available.notify_one();
    }

    async fn open(&self, slot: Slot) -> Result<Lease, ConnectError> {
        match self.connector.open(self.timeout).await {
            Ok(conn) => Ok(Lease {
                conn: Box::new(conn),
                reused: false,
                slot,
                age: Age {
                    opened: Instant::now(),
                    transactions: 0,
                },
            }),
            Err(e) if e.feedback() == Some(Feedback::Connections) => {
                self.withhold(slot);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    fn pop_idle(&self) -> Option<Parked> {
        let mut idle = self.idle.lock().expect("pool lock");
        while let Some(mut parked) = idle.pop() {
            // Upstream spoke while it was parked (an extra line, a 421, a close): dropped.
            if !parked.conn.is_idle_in_step() {
                continue;
            }
            if parked.since.elapsed() < IDLE_LIMIT && !self.reconnect.due(&parked.age) {
                return Some(parked);
            }
            self.retire(parked.conn, parked.slot);
        }
        None
    }

    /// Says goodbye politely, off the message's path; the slot frees when it is done.
    fn retire(&self, mut conn: Box<Client>, slot: Slot) {
        let timeout = self.timeout;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, conn.quit()).await;
            drop(slot);
        });
    }
}
