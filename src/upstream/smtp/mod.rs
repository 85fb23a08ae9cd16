//! `smtp://` and `smtps://` upstream: our SMTP client's connections (`client`), each step's
//! reply checked.
//!
//! We drive MAIL, RCPT, DATA step by step because only then do we know at which step a failure
//! happened, and that decides whether a retry is safe: until the final dot has been sent
//! upstream cannot have accepted the message, so a connection found dead at MAIL, RCPT or DATA
//! is replaced once and the message sent again; after it, never (a duplicate is worse than a
//! `451`). It also lets each step carry its own timeout, and the MAIL parameters follow what
//! the client asked for. When upstream offers PIPELINING, MAIL, RCPT and DATA go as one group
//! (`pipeline.rs`); their replies are still read, timed and classified one by one.
//!
//! - `transaction`: one message's steps on one connection, shared with `mx://`.
//! - `pipeline`: MAIL, RCPT and DATA in one write.
//! - `wire`: the command lines and body bytes exactly as upstream receives them.
//!
//! Bytes: the body is dot-stuffed (a `.` at the start of the message or after CRLF is
//! doubled) and ends in `CRLF.CRLF`; nothing else changes (no line-ending or 8-bit
//! conversion). See `wire.rs`: `wire_body` (and `wire_pieces`) for the trailing CRLF and
//! `dot_after_bare_line_break` for the one case stuffing leaves open.

use std::sync::Arc;
use std::time::Duration;

mod pipeline;
mod transaction;
mod wire;

pub(super) use transaction::{Failure, Step, Transaction};

pub use super::client::ClientTlsError;
use super::client::{Credentials, Tls};
use super::pool::{Connector, Lease, Pool, Reconnect, Security};
use super::{
    Accepted, CheckFuture, Classifier, Feedback, ForwardFuture, Forwarder, Offers, Outgoing,
    Unready, UpstreamError,
};
use crate::config::{SmtpCredentials, UpstreamConfig, UpstreamKind, UpstreamTls};
use crate::message::Envelope;

/// Why an SMTP upstream could not be set up from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum SmtpSetupError {
    #[error("upstream.url: `{0}` is not an smtp:// or smtps:// URL")]
    NotSmtp(String),
    #[error("upstream.password_env: environment variable `{0}` is not set")]
    MissingPasswordEnv(String),
    #[error("upstream: set only one of `password` and `password_env`")]
    TwoPasswords,
    #[error("upstream.username is set, but neither `password` nor `password_env`")]
    MissingPassword,
    #[error("upstream: a password is set without `username`")]
    MissingUsername,
    #[error("upstream TLS for `{host}`: {reason}")]
    Tls {
        host: String,
        reason: ClientTlsError,
    },
}

/// Attempts after upstream's "too many connections", each on another connection.
const RETRIES: usize = 2;

/// Forwards each message to one SMTP server over pooled connections.
pub struct SmtpForwarder {
    pool: Arc<Pool>,
    timeout: Duration,
}

impl SmtpForwarder {
    /// Reads the password from the environment now, so a missing variable stops startup with
    /// a clear message instead of failing every message later.
    pub fn new(cfg: &UpstreamConfig) -> Result<SmtpForwarder, SmtpSetupError> {
        let UpstreamKind::Smtp(smtp) = &cfg.kind else {
            return Err(SmtpSetupError::NotSmtp(cfg.url()));
        };
        let host = &smtp.host;
        let tls = || {
            Tls::verified(host).map_err(|reason| SmtpSetupError::Tls {
                host: host.clone(),
                reason,
            })
        };
        let security = match (smtp.implicit_tls, smtp.client.tls) {
            (true, _) => Security::Implicit(tls()?),
            (false, UpstreamTls::None) => Security::Plain,
            (false, UpstreamTls::Opportunistic) => Security::Opportunistic(tls()?),
            (false, UpstreamTls::Required) => Security::Required(tls()?),
        };
        let connector = Connector {
            name: cfg.name().to_string(),
            host: host.clone(),
            port: smtp.port,
            security,
            hello: smtp.client.helo_name().to_string(),
            credentials: credentials(&smtp.credentials)?,
            classifier: Classifier::new(cfg),
        };
        let timeout = Duration::from_millis(cfg.timeout_ms.get());
        let reconnect = Reconnect::of(&smtp.client);
        let pool = Pool::new(connector, cfg.pool_size.get(), timeout).with_reconnect(reconnect);
        Ok(SmtpForwarder {
            pool: Arc::new(pool),
            timeout,
        })
    }

    async fn transact(
        &self,
        envelope: &Envelope,
        message: &[&[u8]],
    ) -> Result<Accepted, UpstreamError> {
        let classifier = &self.pool.connector.classifier;
        let tx = Transaction::new(envelope, message, self.timeout, classifier)?;

        let mut lease = self.checkout().await?;
        let (mut retried, mut crowded) = (false, 0);
        loop {
            match tx.run(&mut lease.conn).await {
                Ok(accepted) => {
                    self.pool.checkin(lease);
                    return Ok(accepted);
                }
                Err(f) if f.stale && lease.reused && !retried => {
                    tracing::debug!(step = ?f.step, error = %f.error, "pooled upstream connection was dead; retrying on a new one");
                    retried = true;
                    lease = self.pool.reconnect(lease).await?;
                }
                Err(f)
                    if crowded < RETRIES && f.error.feedback() == Some(Feedback::Connections) =>
                {
                    crowded += 1;
                    self.pool.close_shrinking(lease);
                    lease = self.checkout().await?;
                }
                Err(f) => {
                    settle_failed(Arc::clone(&self.pool), lease, &f, ());
                    return Err(f.error);
                }
            }
        }
    }

    /// A connection; one refused with "too many connections" is tried again (on a parked
    /// one, or a new one once the shrunk pool has room).
    async fn checkout(&self) -> Result<Lease, UpstreamError> {
        let mut crowded = 0;
        loop {
            match self.pool.checkout().await {
                Err(e) if crowded < RETRIES && e.feedback() == Some(Feedback::Connections) => {
                    crowded += 1
                }
                other => return Ok(other?),
            }
        }
    }
}

impl Forwarder for SmtpForwarder {
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        Box::pin(self.transact(message.envelope, message.pieces))
    }

    fn check(&self) -> CheckFuture<'_> {
        Box::pin(async {
            let probed = self.pool.probe().await;
            probed.map(|()| None).map_err(|e| Unready(e.to_string()))
        })
    }

    fn offers(&self) -> Offers<'_> {
        Offers {
            crowded: Some(&self.pool.shrinks),
            ..Offers::default()
        }
    }
}

/// Keeps the connection when a reply refused the message but left the session usable: after
/// a reply to the final dot or a local check as it is, after MAIL, RCPT or DATA once an RSET
/// (off the message's path: the client's answer need not wait for it) has put it back between
/// transactions. `hold` (what bounds the connection besides its slot) goes last.
pub(super) fn settle_failed<H: Send + 'static>(
    pool: Arc<Pool>,
    mut lease: Lease,
    failure: &Failure,
    hold: H,
) {
    if !failure.clean {
        return; // dropped: closed without a word, its state is unknown
    }
    if !matches!(failure.step, Step::Mail | Step::Rcpt | Step::Data) {
        pool.checkin(lease);
        return drop(hold);
    }
    tokio::spawn(async move {
        // Bounded like every exchange on the connection (its timeout).
        if lease.conn.command_ok(b"RSET\r\n", 2).await.is_ok() {
            pool.checkin(lease);
        }
        drop(hold);
    });
}

fn credentials(cfg: &SmtpCredentials) -> Result<Option<Credentials>, SmtpSetupError> {
    let password = match (&cfg.password, &cfg.password_env) {
        (Some(_), Some(_)) => return Err(SmtpSetupError::TwoPasswords),
        (Some(p), None) => Some(p.clone()),
        (None, Some(var)) => {
            Some(std::env::var(var).map_err(|_| SmtpSetupError::MissingPasswordEnv(var.clone()))?)
        }
        (None, None) => None,
    };
    match (&cfg.username, password) {
        (Some(user), Some(password)) => Ok(Some(Credentials {
            user: user.clone(),
            password,
        })),
        (Some(_), None) => Err(SmtpSetupError::MissingPassword),
        (None, Some(_)) => Err(SmtpSetupError::MissingUsername),
        (None, None) => Ok(None),
    }
}
