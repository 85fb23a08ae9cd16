//! Opening one ready-to-use connection to an SMTP upstream: TCP (or implicit TLS), greeting,
//! EHLO, STARTTLS, the PIPELINING probe and AUTH. A refusal on the way is classified here,
//! once, so the pool can tell upstream's "too many connections" by its type.

use lettre::transport::smtp::authentication::{Credentials, DEFAULT_MECHANISMS};
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::commands::Ehlo;
use lettre::transport::smtp::extension::ClientId;
use lettre::transport::smtp::Error as SmtpError;

use super::corked::Corked;
use crate::upstream::reply::{describe, smtp_error, unavailable};
use crate::upstream::{Classifier, Feedback, UpstreamError};

/// How the connection is secured; `Implicit` is `smtps://`, the others are `smtp://`.
#[derive(Clone)]
pub(in crate::upstream) enum Security {
    Plain,
    Opportunistic(TlsParameters),
    Required(TlsParameters),
    Implicit(TlsParameters),
}

/// Everything needed to open one ready-to-use connection (greeted, EHLO'd, TLS, AUTH).
pub(in crate::upstream) struct Connector {
    /// The upstream as the operator knows it (its `name`, or the MX host), for the log.
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security: Security,
    pub hello: ClientId,
    pub credentials: Option<Credentials>,
    /// Reads upstream's refusals, here and in the transactions played on the connections.
    pub classifier: Classifier,
}

impl Connector {
    /// Whether its connections write through [`Corked`](super::corked::Corked): every
    /// security but implicit TLS (STARTTLS too, whose records go through it).
    pub(in crate::upstream) fn corked(&self) -> bool {
        !matches!(self.security, Security::Implicit(_))
    }
}

/// Why a connection could not be had.
pub(in crate::upstream) enum ConnectError {
    /// Upstream answered with a negative reply (greeting, EHLO, STARTTLS or AUTH), classified.
    Refused(UpstreamError),
    /// lettre failed without a reply from upstream (TLS, a dropped connection).
    Smtp(SmtpError),
    /// The TCP connection could not be made.
    Io(std::io::Error),
    TimedOut,
    /// Every slot stayed busy for the whole timeout.
    PoolBusy,
}

impl ConnectError {
    /// What upstream's refusal says about our sending, when it refused.
    pub fn feedback(&self) -> Option<Feedback> {
        match self {
            ConnectError::Refused(e) => e.feedback(),
            _ => None,
        }
    }
}

/// A connection that could not be had, as the session's answer: a refusal with a code (a
/// `554` greeting, a failed AUTH) is upstream's own; anything else is "unavailable".
impl From<ConnectError> for UpstreamError {
    fn from(e: ConnectError) -> UpstreamError {
        match e {
            ConnectError::Refused(e) => e,
            ConnectError::Smtp(e) => unavailable(format!("connecting: {}", describe(&e))),
            ConnectError::Io(e) => unavailable(format!("connecting: {e}")),
            ConnectError::TimedOut => unavailable("connecting: timed out".into()),
            ConnectError::PoolBusy => unavailable("every upstream connection stayed busy".into()),
        }
    }
}

impl Connector {
    /// A ready connection, and whether upstream advertised PIPELINING on it.
    pub(super) async fn connect(&self) -> Result<(AsyncSmtpConnection, bool), ConnectError> {
        let mut conn = match &self.security {
            // lettre's own timeout here bounds only the TCP connect; the caller bounds the rest.
            Security::Implicit(params) => AsyncSmtpConnection::connect_tokio1(
                (self.host.as_str(), self.port),
                None,
                &self.hello,
                Some(params.clone()),
                None,
            )
            .await
            .map_err(|e| self.failed(e))?,
            _ => {
                // Our own socket, to turn Nagle off (a large message's final dot goes in a
                // write of its own, which Nagle would hold for a delayed ACK, ~40 ms), and
                // corked: what lettre writes in pieces goes in one write before each read.
                let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
                    .await
                    .map_err(ConnectError::Io)?;
                let _ = tcp.set_nodelay(true);
                let stream = Box::new(Corked::new(tcp));
                AsyncSmtpConnection::connect_with_transport(stream, &self.hello)
                    .await
                    .map_err(|e| self.failed(e))?
            }
        };
        match &self.security {
            Security::Opportunistic(params) if conn.can_starttls() => conn
                .starttls(params.clone(), &self.hello)
                .await
                .map_err(|e| self.failed(e))?,
            // No credentials or mail ever cross a connection that was meant to be encrypted.
            Security::Required(_) if !conn.can_starttls() => {
                return Err(self.refused_ours("it offers no STARTTLS and tls = \"required\"".into()))
            }
            Security::Required(params) => conn
                .starttls(params.clone(), &self.hello)
                .await
                .map_err(|e| self.step_refused("STARTTLS", e))?,
            _ => {}
        }
        let pipelining = advertises_pipelining(&mut conn, &self.hello)
            .await
            .map_err(|e| self.failed(e))?;
        if let Some(credentials) = &self.credentials {
            if (conn.server_info().get_auth_mechanism(DEFAULT_MECHANISMS)).is_none() {
                let why = "credentials are configured but it offers no AUTH PLAIN or LOGIN";
                return Err(self.refused_ours(why.into()));
            }
            conn.auth(DEFAULT_MECHANISMS, credentials)
                .await
                .map_err(|e| self.step_refused("AUTH", e))?;
        }
        Ok((conn, pipelining))
    }

    /// Upstream refused our STARTTLS or AUTH: the relay's credentials, not the message, unless
    /// the reply is about our sending (too many connections, too fast).
    fn step_refused(&self, step: &str, e: SmtpError) -> ConnectError {
        if e.status().is_none() {
            return self.refused_ours(format!("{step} failed: {}", describe(&e)));
        }
        let refusal = self.classifier.classify(smtp_error(&e));
        match refusal.feedback() {
            Some(_) => ConnectError::Refused(refusal),
            None => self.refused_ours(format!("{step} refused: {refusal}")),
        }
    }

    /// The relay's credentials (its TLS, its login) refused: the operator must act, so it is
    /// logged at error here, where it is learnt, naming the upstream and why.
    fn refused_ours(&self, reason: String) -> ConnectError {
        tracing::error!(
            target: "mailsluice::upstream",
            upstream = self.name.as_str(),
            host = self.host.as_str(),
            port = self.port,
            reason = reason.as_str(),
            "upstream.credentials_refused"
        );
        ConnectError::Refused(UpstreamError::Credentials(reason))
    }

    /// lettre's error on the way to a ready connection; a reply is classified.
    fn failed(&self, e: SmtpError) -> ConnectError {
        match e.status() {
            Some(_) => ConnectError::Refused(self.classifier.classify(smtp_error(&e))),
            None => ConnectError::Smtp(e),
        }
    }
}

/// Sends EHLO once more and reads its keywords: lettre's `ServerInfo` drops PIPELINING, and
/// lettre parses only the extensions it knows. Sent after STARTTLS (so it is the encrypted
/// session's answer) and before AUTH (so it cannot disturb an authenticated session). One
/// round trip per connection, not per message.
async fn advertises_pipelining(
    conn: &mut AsyncSmtpConnection,
    hello: &ClientId,
) -> Result<bool, SmtpError> {
    let reply = conn.command(Ehlo::new(hello.clone())).await?;
    // The first line is the greeting; each later one is a keyword and its parameters.
    let offered = reply.message().skip(1).any(|line| {
        line.split_whitespace()
            .next()
            .is_some_and(|word| word.eq_ignore_ascii_case("PIPELINING"))
    });
    Ok(offered)
}
