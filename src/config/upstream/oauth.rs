//! `auth = "xoauth2"` and `[upstream.oauth]`: an `smtp://` upstream that takes an OAuth 2.0
//! bearer token instead of a password (Exchange Online, Gmail), the token obtained from the
//! provider's token endpoint by the relay itself. Here are the keys and their checks; the
//! secrets (`client_secret_env`, `key_file`, `key_env`) are read when the forwarder is built,
//! as `password_env` is.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::config::HttpUrl;

/// How the relay logs in upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamAuth {
    /// AUTH PLAIN or LOGIN with `username` and a password, when a username is set.
    #[default]
    Password,
    /// AUTH XOAUTH2 with a token from `[upstream.oauth]`.
    Xoauth2,
}

/// Whose token endpoint, and which grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OauthProvider {
    /// Microsoft Entra ID: client credentials (a secret, or a certificate's signed
    /// assertion) for the tenant; one token for every mailbox the app may send as.
    Microsoft,
    /// Google: a service account's signed JWT (RS256) with the mailbox as `sub` (domain-wide
    /// delegation); a token per mailbox.
    Google,
    /// Any token endpoint taking client credentials (`client_id`, the secret).
    Generic,
}

/// `[upstream.oauth]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OauthConfig {
    pub provider: OauthProvider,
    /// Microsoft: the directory (tenant) id or a verified domain of the tenant.
    pub tenant_id: Option<String>,
    /// Microsoft, generic: the application (client) id.
    pub client_id: Option<String>,
    /// Microsoft, generic: the environment variable that holds the client secret.
    pub client_secret_env: Option<String>,
    /// Google: the service account's JSON key; Microsoft: a PEM file with the certificate
    /// registered on the app and its private key (a signed client assertion instead of a
    /// secret).
    pub key_file: Option<PathBuf>,
    /// As `key_file`, its text in an environment variable.
    pub key_env: Option<String>,
    /// The token endpoint, when not the provider's own.
    pub token_url: Option<String>,
    /// The scope asked for, when not the provider's SMTP scope.
    pub scope: Option<String>,
}

/// Why the XOAUTH2 keys were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OauthKeyError {
    #[error("auth = \"xoauth2\" needs an [upstream.oauth] table")]
    NoOauthTable,
    #[error("[upstream.oauth] is only for auth = \"xoauth2\"")]
    OauthWithoutXoauth2,
    #[error("auth = \"xoauth2\" needs `username`: the mailbox, or \"{{sender}}\"")]
    NoUsername,
    #[error("auth = \"xoauth2\" takes no `password` or `password_env`: the token is the secret")]
    Password,
    #[error(
        "auth = \"xoauth2\" sends a token: use smtps://, or tls = \"required\" (tls = \"none\" \
         only where the network is trusted, as on loopback)"
    )]
    Opportunistic,
    #[error(
        "username = \"{{sender}}\" needs `mailboxes`: the addresses or @domains it may log in as"
    )]
    NoMailboxes,
    #[error("`mailboxes` is only for username = \"{{sender}}\"")]
    MailboxesWithoutSender,
    #[error("`mailboxes`: `{0}` is neither an address nor an @domain")]
    BadMailbox(String),
    #[error("[upstream.oauth] provider = \"{provider}\" needs `{key}`")]
    Missing {
        provider: &'static str,
        key: &'static str,
    },
    #[error("[upstream.oauth] provider = \"{provider}\" takes no `{key}`")]
    NotFor {
        provider: &'static str,
        key: &'static str,
    },
    #[error("[upstream.oauth] provider = \"{0}\": give one of {1}")]
    OneOf(&'static str, &'static str),
    #[error(
        "[upstream.oauth] token_url: `{0}` is no https:// URL (http:// only to a loopback \
         address)"
    )]
    TokenUrl(String),
}

/// The mailbox the relay logs in as: one for the upstream, or the envelope sender's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mailbox<'a> {
    Fixed(&'a str),
    /// `username = "{sender}"`.
    Sender,
}

/// What `username` says to log in as each message's envelope sender.
pub const SENDER_MAILBOX: &str = "{sender}";

/// A token endpoint's URL: `https://`, or `http://` to a loopback address (tests, a local
/// token broker); never a password in it.
pub fn token_url(url: &str) -> Result<HttpUrl, OauthKeyError> {
    let bad = || OauthKeyError::TokenUrl(url.to_string());
    let split = HttpUrl::parse(url).ok_or_else(bad)?;
    let loopback = (split.host.parse::<IpAddr>()).is_ok_and(|ip| ip.is_loopback());
    match split.https || loopback {
        true => Ok(split),
        false => Err(bad()),
    }
}

impl OauthProvider {
    pub fn as_str(self) -> &'static str {
        match self {
            OauthProvider::Microsoft => "microsoft",
            OauthProvider::Google => "google",
            OauthProvider::Generic => "generic",
        }
    }

    /// The scope of SMTP submission at the provider (none of its own for generic).
    pub fn default_scope(self) -> Option<&'static str> {
        match self {
            OauthProvider::Microsoft => Some("https://outlook.office365.com/.default"),
            OauthProvider::Google => Some("https://mail.google.com/"),
            OauthProvider::Generic => None,
        }
    }
}

impl OauthConfig {
    /// The token endpoint as written: `token_url`, else the provider's own (none for
    /// generic, which must name one).
    pub fn token_url_text(&self) -> Option<String> {
        match (&self.token_url, self.provider) {
            (Some(url), _) => Some(url.clone()),
            (None, OauthProvider::Microsoft) => Some(format!(
                "https://login.microsoftonline.com/{}/oauth2/v2.0/token",
                self.tenant_id.as_deref().unwrap_or_default()
            )),
            (None, OauthProvider::Google) => Some("https://oauth2.googleapis.com/token".into()),
            (None, OauthProvider::Generic) => None,
        }
    }

    /// The token endpoint, split.
    pub fn token_url(&self) -> Result<HttpUrl, OauthKeyError> {
        let url = self
            .token_url_text()
            .ok_or_else(|| self.missing("token_url"))?;
        token_url(&url)
    }

    /// The scope asked for: `scope`, else the provider's.
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref().or(self.provider.default_scope())
    }

    /// Each provider's keys: the ones it needs, the ones it has no use for.
    pub(super) fn check(&self) -> Result<(), OauthKeyError> {
        let has_key = self.key_file.is_some() || self.key_env.is_some();
        if self.key_file.is_some() && self.key_env.is_some() {
            return Err(OauthKeyError::OneOf(
                self.provider.as_str(),
                "`key_file` or `key_env`",
            ));
        }
        match self.provider {
            OauthProvider::Microsoft => {
                self.need(self.tenant_id.is_some(), "tenant_id")?;
                self.need(self.client_id.is_some(), "client_id")?;
                if self.client_secret_env.is_some() == has_key {
                    return Err(OauthKeyError::OneOf(
                        "microsoft",
                        "`client_secret_env` (a client secret) or `key_file`/`key_env` (a \
                         certificate and its key)",
                    ));
                }
            }
            OauthProvider::Google => {
                if !has_key {
                    return Err(OauthKeyError::OneOf(
                        "google",
                        "`key_file` or `key_env` (the service account's JSON key)",
                    ));
                }
                self.refuse(self.tenant_id.is_some(), "tenant_id")?;
                self.refuse(self.client_id.is_some(), "client_id")?;
                self.refuse(self.client_secret_env.is_some(), "client_secret_env")?;
            }
            OauthProvider::Generic => {
                self.need(self.token_url.is_some(), "token_url")?;
                self.need(self.client_id.is_some(), "client_id")?;
                self.need(self.client_secret_env.is_some(), "client_secret_env")?;
                self.refuse(self.tenant_id.is_some(), "tenant_id")?;
                self.refuse(has_key, "key_file")?;
            }
        }
        self.token_url().map(drop)
    }

    fn missing(&self, key: &'static str) -> OauthKeyError {
        OauthKeyError::Missing {
            provider: self.provider.as_str(),
            key,
        }
    }

    fn need(&self, present: bool, key: &'static str) -> Result<(), OauthKeyError> {
        present.then_some(()).ok_or_else(|| self.missing(key))
    }

    fn refuse(&self, present: bool, key: &'static str) -> Result<(), OauthKeyError> {
        match present {
            true => Err(OauthKeyError::NotFor {
                provider: self.provider.as_str(),
                key,
            }),
            false => Ok(()),
        }
    }
}

/// Whether `entry` of `mailboxes` is an address (`printer@contoso.com`) or a domain
/// (`@contoso.com`).
pub(super) fn is_mailbox_entry(entry: &str) -> bool {
    match entry.split_once('@') {
        Some((local, domain)) => {
            !domain.is_empty()
                && !domain.contains('@')
                && !entry.contains(char::is_whitespace)
                && (local.is_empty() || !local.contains(['<', '>']))
        }
        None => false,
    }
}

/// Whether `sender` may log in as itself by `mailboxes`: listed, or its domain listed as
/// `@domain` (both compared without case).
pub fn mailbox_allowed(mailboxes: &[String], sender: &str) -> bool {
    let Some((_, domain)) = sender.rsplit_once('@') else {
        return false;
    };
    mailboxes.iter().any(|entry| match entry.strip_prefix('@') {
        Some(allowed) => allowed.eq_ignore_ascii_case(domain),
        None => entry.eq_ignore_ascii_case(sender),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_url_is_https_or_plain_http_to_loopback() {
        assert!(token_url("https://login.example/t/token").is_ok());
        let local = token_url("http://127.0.0.1:8080/token").unwrap();
        assert_eq!(
            (local.https, local.port, local.path.as_str()),
            (false, 8080, "/token")
        );
        for bad in [
            "http://login.example/token",
            "http://10.0.0.1/token",
            "ftp://x/",
            "https://user:pw@login.example/",
        ] {
            assert!(token_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mailboxes_allow_an_address_or_a_domain() {
        let list = [
            "printer@contoso.com".to_string(),
            "@fabrikam.com".to_string(),
        ];
        assert!(mailbox_allowed(&list, "Printer@Contoso.com"));
        assert!(mailbox_allowed(&list, "anyone@FABRIKAM.com"));
        assert!(!mailbox_allowed(&list, "other@contoso.com"));
        assert!(!mailbox_allowed(&list, "x@sub.fabrikam.com"));
        assert!(!mailbox_allowed(&list, "nodomain"));
        assert!(is_mailbox_entry("@contoso.com") && is_mailbox_entry("a@contoso.com"));
        assert!(!is_mailbox_entry("contoso.com") && !is_mailbox_entry("a@"));
    }
}
