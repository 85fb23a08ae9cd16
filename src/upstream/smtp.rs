//! `smtp://` and `smtps://` upstream: lettre's SMTP connection, each step's reply checked.
//!
//! We drive MAIL, RCPT, DATA ourselves (rather than `send_raw`) because only then do we know
//! at which step a failure happened, and that decides whether a retry is safe: until the final
//! dot has been sent upstream cannot have accepted the message, so a connection found dead at
//! MAIL, RCPT or DATA is replaced once and the message sent again; after it, never (a duplicate
//! is worse than a `451`). It also lets each step carry its own timeout, and the MAIL
//! parameters follow what the client asked for instead of lettre's guesses. When upstream
//! offers PIPELINING, MAIL, RCPT and DATA go as one group (`pipeline.rs`); their replies are
//! still read, timed and classified one by one.
//!
//! Bytes: lettre dot-stuffs the body (a `.` at the start of a line after CRLF is doubled) and
//! appends `CRLF.CRLF`; it changes nothing else (no line-ending or 8-bit conversion). See
//! `wire.rs`: `wire_body` (and `wire_pieces`) for the trailing CRLF and `dot_after_bare_line_break` for the one case its
//! stuffing leaves open.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::commands::{Data, Rset};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use lettre::transport::smtp::Error as SmtpError;

mod checks;
mod pipeline;
mod wire;

pub(super) use pipeline::advertises_pipelining;
use pipeline::{cut_short, Tracked};
use wire::{mail_line, rcpt_line, wire_pieces};

use super::pool::{Connector, Lease, Pool, Reconnect, Security};
use super::reply::{connect_error, describe, rejected, smtp_error, unavailable};
use super::{Accepted, CheckFuture, Classifier, ForwardFuture, Forwarder, UpstreamError};
use crate::config::{UpstreamConfig, UpstreamTls, UpstreamUrl};
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
    Tls { host: String, reason: String },
}

/// Attempts after upstream's "too many connections", each on another connection.
const RETRIES: usize = 2;

/// How much of the body lettre dot-stuffs and writes at a time.
const BODY_SLICE: usize = 64 * 1024;

/// Forwards each message to one SMTP server over pooled connections.
pub struct SmtpForwarder {
    pool: Arc<Pool>,
    timeout: Duration,
    classifier: Classifier,
}

/// The SMTP step at which a transaction failed; it decides whether a retry is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Mail,
    Rcpt,
    Data,
    /// Sending the body and waiting for the reply to the final dot.
    EndOfData,
    /// Checks of our own before MAIL (address forms, extensions upstream lacks).
    Local,
}

/// How a transaction failed, and what that leaves of the connection.
pub(super) struct Failure {
    pub(super) step: Step,
    pub(super) error: UpstreamError,
    /// The connection is between transactions (or can be put there with RSET).
    pub(super) clean: bool,
    /// Nothing was accepted and the connection died under us: worth one fresh attempt.
    pub(super) stale: bool,
}

impl SmtpForwarder {
    /// Reads the password from the environment now, so a missing variable stops startup with
    /// a clear message instead of failing every message later.
    pub fn new(cfg: &UpstreamConfig, helo_name: &str) -> Result<SmtpForwarder, SmtpSetupError> {
        let (host, port, implicit) = match &cfg.url {
            UpstreamUrl::Smtp { host, port } => (host, *port, false),
            UpstreamUrl::Smtps { host, port } => (host, *port, true),
            UpstreamUrl::File { .. } | UpstreamUrl::Mx => {
                return Err(SmtpSetupError::NotSmtp(cfg.url.to_string()))
            }
        };
        let tls = || {
            TlsParameters::new(host.clone()).map_err(|e| SmtpSetupError::Tls {
                host: host.clone(),
                reason: e.to_string(),
            })
        };
        let security = match (implicit, cfg.tls) {
            (true, _) => Security::Implicit(tls()?),
            (false, UpstreamTls::None) => Security::Plain,
            (false, UpstreamTls::Opportunistic) => Security::Opportunistic(tls()?),
            (false, UpstreamTls::Required) => Security::Required(tls()?),
        };
        let connector = Connector {
            host: host.clone(),
            port,
            security,
            hello: ClientId::Domain(cfg.helo_name.clone().unwrap_or_else(|| helo_name.into())),
            credentials: credentials(cfg)?,
            replies: cfg.throttle_replies.clone(),
        };
        let timeout = Duration::from_millis(cfg.timeout_ms.get());
        let reconnect = Reconnect {
            max_messages: (cfg.max_messages_per_connection > 0)
                .then_some(cfg.max_messages_per_connection),
            max_age: (cfg.max_connection_age_ms > 0)
                .then(|| Duration::from_millis(cfg.max_connection_age_ms)),
        };
        let pool = Pool::new(connector, cfg.pool_size.get(), timeout).with_reconnect(reconnect);
        Ok(SmtpForwarder {
            pool: Arc::new(pool),
            timeout,
            classifier: Classifier::new(cfg),
        })
    }

    async fn send(
        &self,
        envelope: &Envelope,
        message: &[&[u8]],
    ) -> Result<Accepted, UpstreamError> {
        let mut tx = Transaction::new(envelope, message, self.timeout)?;

        let mut lease = self.checkout().await?;
        let (mut retried, mut crowded) = (false, 0);
        loop {
            tx.pipelining = lease.pipelining;
            match tx.run(&mut lease.conn).await {
                Ok(accepted) => {
                    self.pool.checkin(lease);
                    return Ok(accepted);
                }
                Err(f) if f.stale && lease.reused && !retried => {
                    tracing::debug!(step = ?f.step, error = %f.error, "pooled upstream connection was dead; retrying on a new one");
                    retried = true;
                    lease = self.pool.reconnect(lease).await.map_err(connect_error)?;
                }
                Err(f) if crowded < RETRIES && self.pool.connector.too_many_failure(&f.error) => {
                    crowded += 1;
                    self.pool.close_shrinking(lease);
                    lease = self.checkout().await?;
                }
                Err(f) => {
                    settle_failed(Arc::clone(&self.pool), lease, &f, self.timeout, ());
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
                Err(e) if crowded < RETRIES && self.pool.connector.too_many(&e) => crowded += 1,
                other => return other.map_err(connect_error),
            }
        }
    }
}

impl Forwarder for SmtpForwarder {
    fn forward<'a>(&'a self, envelope: &'a Envelope, message: &'a [u8]) -> ForwardFuture<'a> {
        Box::pin(async move {
            let sent = self.send(envelope, &[message]).await;
            sent.map_err(|e| self.classifier.classify(e))
        })
    }

    fn forward_pieces<'a>(
        &'a self,
        envelope: &'a Envelope,
        pieces: &'a [&'a [u8]],
    ) -> ForwardFuture<'a> {
        Box::pin(async move {
            let sent = self.send(envelope, pieces).await;
            sent.map_err(|e| self.classifier.classify(e))
        })
    }

    fn check(&self) -> CheckFuture<'_> {
        Box::pin(self.pool.probe())
    }

    fn crowded(&self) -> u64 {
        self.pool.shrinks.load(std::sync::atomic::Ordering::Relaxed)
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
    timeout: Duration,
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
        let reset = tokio::time::timeout(timeout, lease.conn.command(Rset)).await;
        if matches!(reset, Ok(Ok(_))) {
            pool.checkin(lease);
        }
        drop(hold);
    });
}

/// One message's commands, ready to be played on a connection (twice, at most).
pub(super) struct Transaction<'a> {
    pub(super) envelope: &'a Envelope,
    /// The paths as checked by `wire::path`; `None` is the null sender.
    pub(super) from: Option<&'a str>,
    pub(super) rcpts: Vec<&'a str>,
    /// The message in pieces, sent one after the other (our header fields, the client's bytes).
    pub(super) message: &'a [&'a [u8]],
    /// Bounds each step: the write and the wait for its reply.
    pub(super) timeout: Duration,
    /// Upstream advertised PIPELINING on the connection about to be used (see
    /// [`advertises_pipelining`]); set it for each connection the transaction is played on.
    pub(super) pipelining: bool,
}

impl Transaction<'_> {
    /// MAIL, every RCPT and DATA (pipelined when upstream advertises PIPELINING), up to upstream's 354.
    pub(super) async fn prepare(&self, conn: &mut AsyncSmtpConnection) -> Result<(), Failure> {
        let params = self.mail_parameters(conn)?;
        let mail = mail_line(self.from, &params);
        if self.pipelining {
            return self.prepare_pipelined(conn, mail).await;
        }
        self.step(Step::Mail, conn.command(mail)).await?;
        for rcpt in &self.rcpts {
            self.step(Step::Rcpt, conn.command(rcpt_line(rcpt))).await?;
        }
        self.step(Step::Data, conn.command(Data)).await?;
        Ok(())
    }

    /// The body and the final dot, and upstream's reply to it. The body goes to lettre in
    /// slices of the message itself, so its dot-stuffed copy is never more than one slice.
    /// A failure is uncertain only once the whole body was written (see `Tracked`).
    pub(super) async fn finish(&self, conn: &mut AsyncSmtpConnection) -> Result<Accepted, Failure> {
        let whole = AtomicBool::new(false);
        let body = Tracked {
            parts: wire_pieces(self.message)
                .into_iter()
                .flat_map(|piece| piece.chunks(BODY_SLICE)),
            whole: &whole,
        };
        let reply = match self.step(Step::EndOfData, conn.message_iter(body)).await {
            Err(f) if !whole.load(Ordering::Relaxed) => return Err(cut_short(f)),
            other => other?,
        };
        Ok(Accepted::new(reply.message().collect::<Vec<_>>().join(" ")))
    }

    async fn run(&self, conn: &mut AsyncSmtpConnection) -> Result<Accepted, Failure> {
        self.prepare(conn).await?;
        self.finish(conn).await
    }

    /// Declares what the client declared, when upstream understands it. What cannot be
    /// relayed faithfully is refused here, as RFC 6152 and RFC 6531 ask of a relay.
    fn mail_parameters(&self, conn: &AsyncSmtpConnection) -> Result<Vec<MailParameter>, Failure> {
        let info = conn.server_info();
        let local = |code, enhanced, text: &str| Failure {
            step: Step::Local,
            error: rejected(code, enhanced, text.into()),
            clean: true,
            stale: false,
        };
        let mut params = Vec::new();
        let utf8_addresses = self.envelope.from.as_deref().is_some_and(|a| !a.is_ascii())
            || self.envelope.rcpts.iter().any(|a| !a.is_ascii());
        if info.supports_feature(Extension::SmtpUtfEight) {
            if self.envelope.smtputf8 || utf8_addresses {
                params.push(MailParameter::SmtpUtfEight);
            }
        } else if utf8_addresses {
            return Err(local(
                553,
                "5.6.7",
                "upstream does not support SMTPUTF8; non-ASCII address not relayed",
            ));
        }
        let eight_bit = !self.message.iter().all(|piece| piece.is_ascii());
        if info.supports_feature(Extension::EightBitMime) {
            if self.envelope.body_8bit || eight_bit {
                params.push(MailParameter::Body(MailBodyParameter::EightBitMime));
            }
        } else if eight_bit {
            return Err(local(
                554,
                "5.6.3",
                "upstream does not support 8BITMIME; 8-bit message not relayed",
            ));
        }
        Ok(params)
    }

    /// Runs one step under the timeout and classifies its failure.
    async fn step<T>(
        &self,
        step: Step,
        fut: impl std::future::Future<Output = Result<T, SmtpError>>,
    ) -> Result<T, Failure> {
        let before_body = step != Step::EndOfData;
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => match e.status().map(u16::from) {
                // 421: upstream is closing this connection (often its idle timeout, read
                // only now); nothing was accepted, so a fresh connection may do better.
                Some(421) => Err(Failure {
                    step,
                    error: smtp_error(&e),
                    clean: false,
                    stale: before_body,
                }),
                Some(_) => Err(Failure {
                    step,
                    error: smtp_error(&e),
                    clean: true,
                    stale: false,
                }),
                None => Err(Failure {
                    step,
                    error: no_answer(step, format!("{step:?}: {}", describe(&e)), &e),
                    clean: false,
                    stale: before_body && !e.is_client(),
                }),
            },
            Err(_) => Err(Failure {
                step,
                error: no_answer_within(step, self.timeout),
                clean: false,
                stale: false,
            }),
        }
    }
}

/// A step that ended without a reply. Once the body is on its way (`EndOfData`) upstream
/// may have taken the message without our hearing it: that is not the same answer as
/// "unreachable", and the client is told so.
fn no_answer(step: Step, reason: String, e: &SmtpError) -> UpstreamError {
    match step {
        Step::EndOfData if !e.is_client() => UpstreamError::Uncertain(reason),
        _ => unavailable(reason),
    }
}

fn no_answer_within(step: Step, timeout: Duration) -> UpstreamError {
    let reason = format!("no answer at {step:?} within {} ms", timeout.as_millis());
    match step {
        Step::EndOfData => UpstreamError::Uncertain(reason),
        _ => unavailable(reason),
    }
}

fn credentials(cfg: &UpstreamConfig) -> Result<Option<Credentials>, SmtpSetupError> {
    let password = match (&cfg.password, &cfg.password_env) {
        (Some(_), Some(_)) => return Err(SmtpSetupError::TwoPasswords),
        (Some(p), None) => Some(p.clone()),
        (None, Some(var)) => {
            Some(std::env::var(var).map_err(|_| SmtpSetupError::MissingPasswordEnv(var.clone()))?)
        }
        (None, None) => None,
    };
    match (&cfg.username, password) {
        (Some(user), Some(password)) => Ok(Some(Credentials::new(user.clone(), password))),
        (Some(_), None) => Err(SmtpSetupError::MissingPassword),
        (None, Some(_)) => Err(SmtpSetupError::MissingUsername),
        (None, None) => Ok(None),
    }
}
