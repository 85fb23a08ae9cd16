//! AUTH PLAIN (RFC 4616) and LOGIN against `[smtp.auth] users` (RFC 4954). Offered only
//! under TLS unless `allow_plaintext_auth`, so a password never crosses in clear by default.
//! Passwords are checked as `inbound::login` takes logins, a bounded number at once (argon2 is
//! slow and memory-hard on purpose). Every failure is answered after `failure_delay_ms`, and
//! `max_failures` failures from one address within `failure_window_ms` lock it out
//! (`421 4.7.0` and close) for `lockout_ms`. An attempt counts from the start of its check,
//! so parallel guesses past `max_failures` are refused without a check.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use smtp_proto::{AUTH_LOGIN, AUTH_PLAIN};

use super::client::AuthUser;
use super::conn::{Line, Stop};
use super::session::{Flow, Session};
use crate::config::SmtpConfig;
use crate::inbound::login::Login;
use crate::policy::Binding;
use crate::reply::{self, Reply};
use crate::state::context::Context;

/// How an exchange ended without complete credentials.
enum Exchange {
    /// The client sent `*` (RFC 4954 4).
    Cancelled,
    /// Not base64, not UTF-8, or not the mechanism's shape.
    Malformed,
    TooLong,
    Stop(Stop),
}

/// Whether EHLO lists AUTH: users exist, and the connection is encrypted (`tls`) or
/// plaintext AUTH is allowed.
pub fn offered(smtp: &SmtpConfig, tls: bool) -> bool {
    smtp.auth.as_ref().is_some_and(|a| !a.users.is_empty()) && (tls || smtp.allow_plaintext_auth)
}

impl Session {
    pub async fn auth(&mut self, mechanism: u64, initial: &str) -> Flow {
        // Users come from the newest config (SIGHUP).
        self.ctx = self.ctx.latest();
        if let Err(flow) = self.may_auth() {
            return flow;
        }
        let credentials = match mechanism {
            AUTH_PLAIN => self.plain(initial).await,
            AUTH_LOGIN => self.login(initial).await,
            _ => {
                self.reply(reply::unrecognized_auth_type());
                return Flow::Continue;
            }
        };
        let (name, password) = match credentials {
            Ok(c) => c,
            Err(e) => return self.exchange_failed(e),
        };
        let delay = (self.ctx.setup.config.smtp.auth.as_ref()).map_or(0, |a| a.failure_delay_ms);
        let logins = self.ctx.services.auth.clone();
        let verify = verify(self.ctx.clone(), name, password);
        let peer = self.client.peer();
        match logins
            .attempt(peer.ip(), Duration::from_millis(delay), verify)
            .await
        {
            Login::Accepted(user) => {
                tracing::info!(peer = %peer, user = %user.name, "authenticated");
                self.client.authenticated(user);
                self.reply(reply::auth_succeeded());
                Flow::Continue
            }
            Login::Refused => {
                tracing::info!(peer = %peer, "AUTH failed");
                self.reply(reply::auth_failed());
                Flow::Continue
            }
            Login::LockedOut { now } => {
                match now {
                    true => {
                        tracing::warn!(peer = %peer, "AUTH failures past the threshold: locked out")
                    }
                    false => {
                        tracing::warn!(peer = %peer, "AUTH refused: locked out, or too many failures in flight")
                    }
                }
                self.reply(reply::auth_locked_out());
                Flow::Close
            }
        }
    }

    /// Whether AUTH may start now; `Err` carries how the session goes on, already answered.
    fn may_auth(&mut self) -> Result<(), Flow> {
        let smtp = &self.ctx.setup.config.smtp;
        let refusal = if smtp.auth.as_ref().is_none_or(|a| a.users.is_empty()) {
            Some(reply::not_implemented("AUTH"))
        } else if !self.client.tls() && !smtp.allow_plaintext_auth {
            Some(reply::encryption_required())
        } else if !self.client.greeted() {
            Some(reply::bad_sequence("Send EHLO first"))
        } else if self.client.auth().is_some() {
            Some(reply::bad_sequence("Already authenticated"))
        } else if self.transaction.is_some() {
            Some(reply::bad_sequence(
                "AUTH is not allowed during a mail transaction",
            ))
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.reply(refusal);
            return Err(Flow::Continue);
        }
        if self.ctx.services.auth.locked_out(self.client.peer().ip()) {
            self.reply(reply::auth_locked_out());
            return Err(Flow::Close);
        }
        Ok(())
    }

    /// Answers an exchange that ended without complete credentials.
    fn exchange_failed(&mut self, exchange: Exchange) -> Flow {
        let reply = match exchange {
            Exchange::Cancelled => reply::auth_cancelled(),
            Exchange::Malformed => reply::syntax_error("cannot decode the AUTH response"),
            Exchange::TooLong => {
                reply::line_too_long(self.ctx.setup.config.smtp.max_line_bytes.get())
            }
            Exchange::Stop(stop) => return self.stopped(stop),
        };
        self.reply(reply);
        Flow::Continue
    }

    /// PLAIN: one response, `authzid NUL authcid NUL password`. An authzid other than the
    /// user itself (acting for someone else) is not supported and fails like a bad password.
    async fn plain(&mut self, initial: &str) -> Result<(String, String), Exchange> {
        let raw = if initial.is_empty() {
            self.challenge("").await?
        } else {
            decode(initial.as_bytes())?
        };
        let parts: Vec<&[u8]> = raw.split(|&b| b == 0).collect();
        let [authz, authc, password] = parts[..] else {
            return Err(Exchange::Malformed);
        };
        let (authc, password) = (utf8(authc)?, utf8(password)?);
        if !authz.is_empty() && authz != authc.as_bytes() {
            return Ok((String::new(), String::new()));
        }
        Ok((authc, password))
    }

    /// LOGIN: the user name (maybe as the initial response), then the password.
    async fn login(&mut self, initial: &str) -> Result<(String, String), Exchange> {
        let name = if initial.is_empty() {
            self.challenge("VXNlcm5hbWU6").await?
        } else {
            decode(initial.as_bytes())?
        };
        let password = self.challenge("UGFzc3dvcmQ6").await?;
        Ok((utf8(&name)?, utf8(&password)?))
    }

    /// Sends `334 text` and reads the client's decoded answer.
    async fn challenge(&mut self, text: &str) -> Result<Vec<u8>, Exchange> {
        self.conn.reply(&Reply::raw(334, text.to_owned()));
        match self.conn.read_line(self.place.shutdown()).await {
            Ok(Line::Command(line)) => {
                decode(line.strip_suffix(b"\r\n").ok_or(Exchange::Malformed)?)
            }
            Ok(Line::TooLong) => Err(Exchange::TooLong),
            Err(stop) => Err(Exchange::Stop(stop)),
        }
    }

    /// Ends the session when the client left, idled or the relay is stopping mid-exchange.
    fn stopped(&mut self, stop: Stop) -> Flow {
        match stop {
            Stop::Idle => self.reply(reply::idle_timeout()),
            Stop::Shutdown => self.reply(reply::shutting_down()),
            Stop::Closed | Stop::DataTimeout => {}
        }
        Flow::Close
    }
}

/// Base64 of an AUTH response; `=` is the empty response and `*` cancels (RFC 4954).
fn decode(text: &[u8]) -> Result<Vec<u8>, Exchange> {
    match text {
        b"*" => Err(Exchange::Cancelled),
        b"=" => Ok(Vec::new()),
        _ => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|_| Exchange::Malformed),
    }
}

fn utf8(bytes: &[u8]) -> Result<String, Exchange> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Exchange::Malformed)
}

/// The user `name` if `password` is its password. An unknown name costs one hash check
/// too, so response times do not tell which names exist.
async fn verify(ctx: Arc<Context>, name: String, password: String) -> Option<AuthUser> {
    let users = &ctx.setup.config.smtp.auth.as_ref()?.users;
    let found = users.iter().find(|u| *u.user.get_ref() == name);
    let hash = found.or(users.first())?.password_hash.get_ref().clone();
    let ok = ctx.services.auth.checks.matches(hash, password).await;
    let user = found.filter(|_| ok)?;
    let binding = user.senders().map(|senders| Binding {
        user: name.clone(),
        senders,
    });
    Some(AuthUser {
        name,
        tenant: user.tenant().to_string(),
        trust_key_header: user.trust_key_header,
        binding,
    })
}
