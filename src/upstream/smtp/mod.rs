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
//! - `mailboxes`: the pool a message goes through (one, or one per sender's mailbox with
//!   XOAUTH2's `username = "{sender}"`).
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

mod mailboxes;
mod pipeline;
mod transaction;
mod wire;

pub(super) use transaction::{Failure, Step, Transaction};

pub use super::client::ClientTlsError;
use super::client::{Credentials, Tls};
use super::oauth::{OauthSetupError, TokenSource};
use super::pool::{Connector, Lease, Login, Pool, Reconnect, Security};
use super::{
    Accepted, CheckFuture, Classifier, Feedback, ForwardFuture, Forwarder, Offers, Outgoing,
    Unready, UpstreamError,
};
use crate::config::{Mailbox, SmtpCredentials, UpstreamConfig, UpstreamKind, UpstreamTls};
use crate::message::Envelope;
use mailboxes::{PerSender, Pools};

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
    #[error(transparent)]
    Oauth(#[from] OauthSetupError),
}

/// Attempts after upstream's "too many connections", each on another connection.
const RETRIES: usize = 2;

/// Forwards each message to one SMTP server over pooled connections.
pub struct SmtpForwarder {
    pools: Pools,
    timeout: Duration,
    /// With `auth = "xoauth2"`: the tokens, for the readiness check and the metrics.
    tokens: Option<Arc<TokenSource>>,
}

impl SmtpForwarder {
    /// Reads the password (or the OAuth secret or key) now, so a missing variable stops
    /// startup with a clear message instead of failing every message later.
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
        let timeout = Duration::from_millis(cfg.timeout_ms.get());
        let tokens = match &smtp.credentials.oauth {
            Some(oauth) => Some(TokenSource::new(cfg.name(), oauth, timeout)?),
            None => None,
        };
        let login = match (smtp.credentials.mailbox(), &tokens) {
            (Some(Mailbox::Fixed(mailbox)), Some(tokens)) => Login::Xoauth2 {
                mailbox: mailbox.to_string(),
                tokens: Arc::clone(tokens),
            },
            (Some(Mailbox::Sender), _) => Login::None, // set per mailbox
            _ => credentials(&smtp.credentials)?.map_or(Login::None, Login::Password),
        };
        let connector = Connector {
            name: cfg.name().to_string(),
            host: host.clone(),
            port: smtp.port,
            security,
            hello: smtp.client.helo_name().to_string(),
            login,
            classifier: Classifier::new(cfg),
        };
        let reconnect = Reconnect::of(&smtp.client);
        let pools = match (smtp.credentials.mailbox(), &tokens) {
            (Some(Mailbox::Sender), Some(tokens)) => Pools::PerSender(Box::new(PerSender::new(
                smtp.credentials.mailboxes.clone(),
                connector,
                Arc::clone(tokens),
                (cfg.pool_size.get(), timeout, reconnect),
            ))),
            _ => {
                let pool = Pool::new(connector, cfg.pool_size.get(), timeout);
                Pools::One(Arc::new(pool.with_reconnect(reconnect)))
            }
        };
        Ok(SmtpForwarder {
            pools,
            timeout,
            tokens,
        })
    }

    async fn transact(
        &self,
        envelope: &Envelope,
        message: &[&[u8]],
    ) -> Result<Accepted, UpstreamError> {
        let pool = self.pools.for_message(envelope)?;
        let classifier = &pool.connector.classifier;
        let tx = Transaction::new(envelope, message, self.timeout, classifier)?;

        let mut lease = checkout(&pool).await?;
        let (mut retried, mut crowded) = (false, 0);
        loop {
            match tx.run(&mut lease.conn).await {
                Ok(accepted) => {
                    pool.checkin(lease);
                    return Ok(accepted);
                }
                Err(f) if f.stale && lease.reused && !retried => {
                    tracing::debug!(step = ?f.step, error = %f.error, "pooled upstream connection was dead; retrying on a new one");
                    retried = true;
                    lease = pool.reconnect(lease).await?;
                }
                Err(f)
                    if crowded < RETRIES && f.error.feedback() == Some(Feedback::Connections) =>
                {
                    crowded += 1;
                    pool.close_shrinking(lease);
                    lease = checkout(&pool).await?;
                }
                Err(f) => {
                    settle_failed(Arc::clone(&pool), lease, &f, ());
                    return Err(f.error);
                }
            }
        }
    }

    /// Whether upstream can be logged in to: the one pool's probe; with a pool per sender,
    /// the token endpoint's last word (a token for every mailbox comes only with a message).
    async fn probe(&self) -> Result<(), Unready> {
        if let Some(pool) = self.pools.one() {
            return pool.probe().await.map_err(|e| Unready(e.to_string()));
        }
        match self.tokens.as_ref().and_then(|t| t.last_failure()) {
            Some(failure) => Err(Unready(format!("no XOAUTH2 token: {failure}"))),
            None => Ok(()),
        }
    }
}

/// A connection; one refused with "too many connections" is tried again (on a parked one, or
/// a new one once the shrunk pool has room).
async fn checkout(pool: &Pool) -> Result<Lease, UpstreamError> {
    let mut crowded = 0;
    loop {
        match pool.checkout().await {
            Err(e) if crowded < RETRIES && e.feedback() == Some(Feedback::Connections) => {
                crowded += 1
            }
            other => return Ok(other?),
        }
    }
}

impl Forwarder for SmtpForwarder {
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        Box::pin(self.transact(message.envelope, message.pieces))
    }

    fn check(&self) -> CheckFuture<'_> {
        Box::pin(async { self.probe().await.map(|()| None) })
    }

    fn offers(&self) -> Offers<'_> {
        Offers {
            crowded: self.pools.one().map(|pool| &pool.shrinks),
            tokens: self.tokens.as_ref().map(|t| &t.counts),
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
