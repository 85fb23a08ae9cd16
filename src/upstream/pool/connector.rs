//! Opening one ready-to-use connection to an SMTP upstream: TCP (or implicit TLS), greeting,
//! EHLO, STARTTLS and AUTH (a password, or an XOAUTH2 token: asked for before the
//! connection, and renewed once when upstream refuses it). A refusal on the way is classified
//! here, once, so the pool can tell upstream's "too many connections" by its type.

use std::sync::Arc;
use std::time::Duration;

use crate::upstream::client::{Client, ClientError, Credentials, Tls};
use crate::upstream::oauth::{Token, TokenError, TokenSource};
use crate::upstream::reply::{smtp_error, unavailable};
use crate::upstream::{Classifier, Feedback, UpstreamError};

/// How the connection is secured; `Implicit` is `smtps://`, the others are `smtp://`.
#[derive(Clone)]
pub(in crate::upstream) enum Security {
    Plain,
    Opportunistic(Tls),
    Required(Tls),
    Implicit(Tls),
}

/// Everything needed to open one ready-to-use connection (greeted, EHLO'd, TLS, AUTH).
#[derive(Clone)]
pub(in crate::upstream) struct Connector {
    /// The upstream as the operator knows it (its `name`, or the MX host), for the log.
    pub name: String,
    pub host: String,
    pub port: u16,
    pub security: Security,
    /// The name given in EHLO.
    pub hello: String,
    pub login: Login,
    /// Reads upstream's refusals, here and in the transactions played on the connections.
    pub classifier: Classifier,
}

/// How a connection logs in upstream.
#[derive(Clone)]
pub(in crate::upstream) enum Login {
    /// No AUTH.
    None,
    /// AUTH PLAIN or LOGIN.
    Password(Credentials),
    /// AUTH XOAUTH2 as `mailbox`, with a token from `tokens`.
    Xoauth2 {
        mailbox: String,
        tokens: Arc<TokenSource>,
    },
}

/// Why a connection could not be had.
pub(in crate::upstream) enum ConnectError {
    /// Upstream answered with a negative reply (greeting, EHLO, STARTTLS or AUTH), classified.
    Refused(UpstreamError),
    /// No usable reply from upstream (TLS, a dropped connection, a malformed reply).
    Client(ClientError),
    /// The TCP connection could not be made.
    Io(std::io::Error),
    TimedOut,
    /// Every slot stayed busy for the whole timeout.
    PoolBusy,
    /// Upstream refused the XOAUTH2 token with a `5xx`: worth once more with a new token.
    TokenRefused(UpstreamError),
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
            ConnectError::Client(e) => unavailable(format!("connecting: {e}")),
            ConnectError::Io(e) => unavailable(format!("connecting: {e}")),
            ConnectError::TimedOut => unavailable("connecting: timed out".into()),
            ConnectError::PoolBusy => unavailable("every upstream connection stayed busy".into()),
            ConnectError::TokenRefused(e) => UpstreamError::Credentials(e.to_string()),
        }
    }
}

impl Connector {
    /// A ready connection, within `timeout` (and with XOAUTH2, the token's request before it,
    /// within its own); a token upstream refuses is renewed, and the login tried once more
    /// on a new connection.
    pub(super) async fn open(&self, timeout: Duration) -> Result<Client, ConnectError> {
        let bounded = |token: Option<Token>| async move {
            match tokio::time::timeout(timeout, self.connect(timeout, token.as_ref())).await {
                Ok(connected) => connected,
                Err(_) => Err(ConnectError::TimedOut),
            }
        };
        let Login::Xoauth2 { mailbox, tokens } = &self.login else {
            return bounded(None).await;
        };
        let token = tokens.token(mailbox).await.map_err(|e| self.no_token(e))?;
        match bounded(Some(token.clone())).await {
            Err(ConnectError::TokenRefused(refusal)) => {
                tracing::info!(
                    target: "mailsluice::upstream",
                    upstream = self.name.as_str(),
                    mailbox = mailbox.as_str(),
                    refusal = %refusal,
                    "upstream.token_refused"
                );
                let token = (tokens.renew(mailbox, &token).await).map_err(|e| self.no_token(e))?;
                match bounded(Some(token)).await {
                    Err(ConnectError::TokenRefused(refusal)) => {
                        Err(self.refused_ours(format!("AUTH XOAUTH2 refused: {refusal}")))
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// A ready connection: greeted, EHLO'd, encrypted as configured, logged in (with `token`
    /// for XOAUTH2); each of its exchanges bounded by `timeout`.
    async fn connect(
        &self,
        timeout: Duration,
        token: Option<&Token>,
    ) -> Result<Client, ConnectError> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(ConnectError::Io)?;
        // Nagle off: what we write goes when we say (the cork joins the small pieces).
        let _ = tcp.set_nodelay(true);
        let mut conn = match &self.security {
            Security::Implicit(tls) => Client::implicit_tls(tcp, tls, timeout).await,
            _ => Client::plain(tcp, timeout).await,
        }
        .map_err(|e| self.failed(e))?;
        conn.ehlo(&self.hello).await.map_err(|e| self.failed(e))?;
        let offered = conn.extensions().starttls;
        match &self.security {
            Security::Opportunistic(tls) if offered => conn
                .starttls(tls, &self.hello)
                .await
                .map_err(|e| self.failed(e))?,
            // No credentials or mail ever cross a connection that was meant to be encrypted.
            Security::Required(_) if !offered => {
                return Err(self.refused_ours("it offers no STARTTLS and tls = \"required\"".into()))
            }
            Security::Required(tls) => conn
                .starttls(tls, &self.hello)
                .await
                .map_err(|e| self.step_refused("STARTTLS", e))?,
            _ => {}
        }
        self.log_in(&mut conn, token).await?;
        Ok(conn)
    }

    /// AUTH as configured: a password, or XOAUTH2 with `token` (a `5xx` to it is
    /// [`ConnectError::TokenRefused`], for the caller to renew it).
    async fn log_in(&self, conn: &mut Client, token: Option<&Token>) -> Result<(), ConnectError> {
        match (&self.login, token) {
            (Login::None, _) => {}
            (Login::Password(credentials), _) => match conn.auth(credentials).await {
                Ok(true) => {}
                Ok(false) => {
                    let why = "credentials are configured but it offers no AUTH PLAIN or LOGIN";
                    return Err(self.refused_ours(why.into()));
                }
                Err(e) => return Err(self.step_refused("AUTH", e)),
            },
            (Login::Xoauth2 { mailbox, .. }, Some(token)) => {
                if !conn.extensions().auth_xoauth2 {
                    let why = "auth = \"xoauth2\" but it offers no AUTH XOAUTH2";
                    return Err(self.refused_ours(why.into()));
                }
                match conn.auth_xoauth2(mailbox, &token.secret).await {
                    Ok(()) => {}
                    Err(e) if e.code().is_some_and(|c| c >= 500) => {
                        return Err(ConnectError::TokenRefused(smtp_error(&e)))
                    }
                    Err(e) => return Err(self.step_refused("AUTH", e)),
                }
            }
            (Login::Xoauth2 { .. }, None) => {
                return Err(self.refused_ours("no XOAUTH2 token to log in with".into()))
            }
        }
        Ok(())
    }

    /// No token to log in with: the relay's credentials, `451 4.7.0` for the message (the
    /// endpoint's failure was logged where it was learnt).
    fn no_token(&self, e: TokenError) -> ConnectError {
        ConnectError::Refused(UpstreamError::NoCredentials(format!(
            "no XOAUTH2 token: {e}"
        )))
    }

    /// Upstream refused our STARTTLS or AUTH: the relay's credentials, not the message, unless
    /// the reply is about our sending (too many connections, too fast).
    fn step_refused(&self, step: &str, e: ClientError) -> ConnectError {
        if e.code().is_none() {
            return self.refused_ours(format!("{step} failed: {e}"));
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

    /// A failure on the way to a ready connection; a reply is classified.
    fn failed(&self, e: ClientError) -> ConnectError {
        match e.code() {
            Some(_) => ConnectError::Refused(self.classifier.classify(smtp_error(&e))),
            None => ConnectError::Client(e),
        }
    }
}
