//! `smtp://host:port` and `smtps://host:port`: one SMTP server (a smarthost such as SES's SMTP
//! endpoint), with its credentials: a password, or an OAuth 2.0 token (`oauth.rs`).

use serde::Deserialize;

use super::keys::KindKeys;
use super::oauth::{
    is_mailbox_entry, Mailbox, OauthConfig, OauthKeyError, UpstreamAuth, SENDER_MAILBOX,
};
use super::smtp_client::{SmtpClient, UpstreamTls};
use super::{UpstreamKeyError, UpstreamUrlError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpUpstream {
    pub host: String,
    pub port: u16,
    /// `smtps://`: TLS from the first byte (port 465); `smtp://` uses STARTTLS per `tls`.
    pub implicit_tls: bool,
    pub credentials: SmtpCredentials,
    pub client: SmtpClient,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SmtpCredentials {
    pub username: Option<String>,
    pub password: Option<String>,
    /// Name of the environment variable that holds the password, so it stays out of files.
    pub password_env: Option<String>,
    /// `password` (the default) or `xoauth2`.
    #[serde(default)]
    pub auth: UpstreamAuth,
    /// `[upstream.oauth]`: where the XOAUTH2 token comes from (boxed: most upstreams have
    /// none, and the kind is moved whole).
    pub oauth: Option<Box<OauthConfig>>,
    /// With `username = "{sender}"`: the addresses and `@domains` the relay may log in as.
    #[serde(default)]
    pub mailboxes: Vec<String>,
}

impl SmtpCredentials {
    pub(super) const KEYS: &'static [&'static str] = &[
        "username",
        "password",
        "password_env",
        "auth",
        "oauth",
        "mailboxes",
    ];

    /// The mailbox XOAUTH2 logs in as, when `auth = "xoauth2"`.
    pub fn mailbox(&self) -> Option<Mailbox<'_>> {
        if self.auth != UpstreamAuth::Xoauth2 {
            return None;
        }
        match self.username.as_deref()? {
            SENDER_MAILBOX => Some(Mailbox::Sender),
            fixed => Some(Mailbox::Fixed(fixed)),
        }
    }

    /// The XOAUTH2 keys together: a token table for `xoauth2` and only then, a mailbox, no
    /// password, TLS unless the operator said `none`, and an allow-list for `{sender}`.
    fn check(&self, client: &SmtpClient, implicit_tls: bool) -> Result<(), OauthKeyError> {
        let sender = self.username.as_deref() == Some(SENDER_MAILBOX);
        let takes_mailboxes = sender && self.auth == UpstreamAuth::Xoauth2;
        if !(self.mailboxes.is_empty() || takes_mailboxes) {
            return Err(OauthKeyError::MailboxesWithoutSender);
        }
        let oauth = match (self.auth, &self.oauth) {
            (UpstreamAuth::Password, None) => return Ok(()),
            (UpstreamAuth::Password, Some(_)) => return Err(OauthKeyError::OauthWithoutXoauth2),
            (UpstreamAuth::Xoauth2, None) => return Err(OauthKeyError::NoOauthTable),
            (UpstreamAuth::Xoauth2, Some(oauth)) => oauth,
        };
        if self.username.is_none() {
            return Err(OauthKeyError::NoUsername);
        }
        if self.password.is_some() || self.password_env.is_some() {
            return Err(OauthKeyError::Password);
        }
        if !implicit_tls && client.tls == UpstreamTls::Opportunistic {
            return Err(OauthKeyError::Opportunistic);
        }
        if sender && self.mailboxes.is_empty() {
            return Err(OauthKeyError::NoMailboxes);
        }
        if let Some(bad) = self.mailboxes.iter().find(|m| !is_mailbox_entry(m)) {
            return Err(OauthKeyError::BadMailbox(bad.clone()));
        }
        oauth.check()
    }
}

impl SmtpUpstream {
    pub(super) const KEYS: &'static [&'static [&'static str]] =
        &[SmtpCredentials::KEYS, SmtpClient::KEYS];

    /// `rest` is what follows `smtp://` (`implicit_tls` false) or `smtps://`.
    pub(super) fn from_url(
        rest: &str,
        implicit_tls: bool,
    ) -> Result<SmtpUpstream, UpstreamUrlError> {
        let default_port = if implicit_tls { 465 } else { 25 };
        let (host, port) = split_host_port(rest.trim_end_matches('/'), default_port)?;
        Ok(SmtpUpstream {
            host,
            port,
            implicit_tls,
            credentials: SmtpCredentials::default(),
            client: SmtpClient::default(),
        })
    }

    pub(super) fn read_keys(&mut self, keys: &mut KindKeys) -> Result<(), UpstreamKeyError> {
        self.credentials = keys.take(SmtpCredentials::KEYS)?;
        self.client = keys.take(SmtpClient::KEYS)?;
        Ok(())
    }

    /// The keys that must go together (XOAUTH2's), once all of them are read.
    pub(super) fn check_together(&self) -> Result<(), UpstreamKeyError> {
        (self.credentials.check(&self.client, self.implicit_tls)).map_err(UpstreamKeyError::Oauth)
    }
}

impl std::fmt::Display for SmtpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.implicit_tls { "smtps" } else { "smtp" };
        match self.host.contains(':') {
            true => write!(f, "{scheme}://[{}]:{}", self.host, self.port),
            false => write!(f, "{scheme}://{}:{}", self.host, self.port),
        }
    }
}

fn split_host_port(authority: &str, default_port: u16) -> Result<(String, u16), UpstreamUrlError> {
    if authority.is_empty() {
        return Err(UpstreamUrlError::NoHost);
    }
    let port = |p: &str| {
        p.parse()
            .map_err(|_| UpstreamUrlError::BadPort(p.to_string()))
    };
    // Bracketed IPv6 literal: [::1]:25
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or(UpstreamUrlError::UnclosedBracket)?;
        let port = match after.strip_prefix(':') {
            Some(p) => port(p)?,
            None => default_port,
        };
        return Ok((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, p)) => Ok((host.to_string(), port(p)?)),
        None => Ok((authority.to_string(), default_port)),
    }
}
