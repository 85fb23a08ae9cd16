//! `[[webhook]]`: where a tenant is told what became of its messages. Each table names the
//! tenant (as `[tenant]` names it, or `"*"`), an `https://` URL, the variable holding
//! its signing secret, and the events it wants. A URL to an internal address, or over plain
//! `http://`, is refused unless its address is in the table's `allow_networks`: a webhook is
//! a request the relay makes from inside the operator's network, and must not become a way
//! to reach loopback, the metadata service or the private network.

use std::net::IpAddr;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;

use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

use super::network::{canonical, internal};
use super::{BrokenRule, Config, HttpUrl};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Its name in metrics, logs and the status page; `webhook<N>` (its place in the file,
    /// from 1) when not given.
    #[serde(default)]
    pub name: String,
    /// The tenant whose events it gets (a message's tenant of `[tenant]`; the reputation
    /// guard's key for its own events), or `"*"` for every tenant's.
    pub tenant: Spanned<String>,
    pub url: Spanned<String>,
    /// The environment variable holding the signing secret, read at load.
    pub secret_env: Spanned<String>,
    /// The secret itself, from `secret_env`.
    #[serde(skip)]
    pub secret: Secret,
    /// Which events it gets; all when not given. Spanned: an empty list is reported at its
    /// line.
    #[serde(default = "EventType::all")]
    pub events: Spanned<Vec<EventType>>,
    /// Networks its URL may reach although internal (and over `http://`).
    #[serde(default)]
    pub allow_networks: Vec<IpNet>,
    /// A PEM file of certificates trusted besides the system's roots (a private CA).
    pub ca_file: Option<Spanned<PathBuf>>,
    /// The certificates of `ca_file` (DER), read at load.
    #[serde(skip)]
    pub ca_certs: Vec<Vec<u8>>,
    /// Events held for it at most; past it the oldest is dropped (and counted).
    #[serde(default = "default_max_queue")]
    pub max_queue: NonZeroUsize,
    /// The events' bytes (as posted) held for it at most; past it the oldest is dropped (and
    /// counted): events naming many recipients cost memory that a count of events does not
    /// see.
    #[serde(default = "default_max_queue_bytes")]
    pub max_queue_bytes: NonZeroUsize,
    /// Events in one POST at most.
    #[serde(default = "default_max_batch")]
    pub max_batch: NonZeroUsize,
    /// One POST's bound, from connecting to the response's status.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: NonZeroU64,
    /// How long a batch is sent again after its first POST failed, before it is given up: a
    /// receiver down for a deploy or an incident gets its events when it comes back.
    #[serde(default = "default_retry_window_ms")]
    pub retry_window_ms: NonZeroU64,
    /// POSTs of one batch at most (the first and its retries) within the window; none but the
    /// window when not given.
    pub max_attempts: Option<NonZeroU64>,
}

/// A signing secret: never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// What a webhook can be told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// Upstream took the message (its `250`).
    Accepted,
    /// The client was refused the message (the reply it got).
    Refused,
    /// Hold mode took the message into the spool.
    Held,
    /// A held message was sent from the spool.
    Released,
    /// SES reported a hard bounce.
    Bounced,
    /// SES reported a complaint.
    Complained,
    /// An address is now refused at RCPT.
    Suppressed,
    /// The reputation guard paused the tenant.
    Paused,
    /// The tenant's rates fell back under the limits.
    Resumed,
}

impl EventType {
    pub const ALL: [EventType; 9] = [
        EventType::Accepted,
        EventType::Refused,
        EventType::Held,
        EventType::Released,
        EventType::Bounced,
        EventType::Complained,
        EventType::Suppressed,
        EventType::Paused,
        EventType::Resumed,
    ];

    fn all() -> Spanned<Vec<EventType>> {
        Spanned::new(0..0, EventType::ALL.to_vec())
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Accepted => "accepted",
            EventType::Refused => "refused",
            EventType::Held => "held",
            EventType::Released => "released",
            EventType::Bounced => "bounced",
            EventType::Complained => "complained",
            EventType::Suppressed => "suppressed",
            EventType::Paused => "paused",
            EventType::Resumed => "resumed",
        }
    }
}

fn default_max_queue() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap()
}

fn default_max_batch() -> NonZeroUsize {
    NonZeroUsize::new(100).unwrap()
}

fn default_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(10_000).unwrap()
}

fn default_max_queue_bytes() -> NonZeroUsize {
    NonZeroUsize::new(16 << 20).unwrap()
}

fn default_retry_window_ms() -> NonZeroU64 {
    NonZeroU64::new(3_600_000).unwrap()
}

impl WebhookConfig {
    /// Its URL, split (checked at load, so it parses).
    pub fn target(&self) -> Result<HttpUrl, WebhookRule> {
        parse_url(self.url.get_ref())
    }

    /// Whether it may connect to `ip`: inside `allow_networks`, or (over `https://`) a
    /// public address.
    pub fn may_reach(&self, https: bool, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.allow_networks.iter().any(|n| n.contains(&ip)) || (https && !internal(ip))
    }
}

/// A webhook's rule broken.
#[derive(Debug, thiserror::Error)]
pub enum WebhookRule {
    #[error("no tenant: name one as [tenant] gives it, or \"*\" for every tenant")]
    NoTenant,
    #[error("`{0}` is no http(s) URL with a host")]
    NotUrl(String),
    #[error("`{0}` is plain http://: allowed only to an address in allow_networks")]
    PlainHttp(String),
    #[error("`{0}` is an internal address: allowed only when allow_networks lists it")]
    Internal(String),
    #[error("the environment variable `{0}` is not set or empty")]
    SecretNotSet(String),
    #[error("the name `{0}` is taken by another webhook")]
    DuplicateName(String),
    #[error("no events listed: leave `events` out for all of them")]
    NoEvents,
    #[error("cannot read certificates from {0}: {1}")]
    CaFile(PathBuf, String),
}

/// Splits `url`: `https://host[:port][/path]` (or `http://`).
fn parse_url(url: &str) -> Result<HttpUrl, WebhookRule> {
    HttpUrl::parse(url).ok_or_else(|| WebhookRule::NotUrl(url.to_string()))
}

/// The addresses a host name stands for without asking DNS: an address literal, or
/// `localhost` (RFC 6761: always loopback).
fn known_addresses(host: &str) -> Vec<IpAddr> {
    let lower = host.to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
        ];
    }
    host.parse().map(|ip| vec![ip]).unwrap_or_default()
}

/// The URL's rules that can be checked at load; a host name is checked again at each
/// delivery, against the addresses DNS gives then.
fn check_url(hook: &WebhookConfig) -> Result<(), WebhookRule> {
    let url = hook.target()?;
    let known = known_addresses(&url.host);
    for ip in &known {
        if !hook.may_reach(url.https, *ip) {
            return Err(match url.https {
                true => WebhookRule::Internal(ip.to_string()),
                false => WebhookRule::PlainHttp(hook.url.get_ref().clone()),
            });
        }
    }
    if !url.https && known.is_empty() && hook.allow_networks.is_empty() {
        return Err(WebhookRule::PlainHttp(hook.url.get_ref().clone()));
    }
    Ok(())
}

/// The certificates of a PEM file, at least one.
fn read_certs(path: &std::path::Path) -> Result<Vec<Vec<u8>>, WebhookRule> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let fail = |e: String| WebhookRule::CaFile(path.to_owned(), e);
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    match certs.is_empty() {
        true => Err(fail("no certificate in it".into())),
        false => Ok(certs),
    }
}

/// Names each unnamed webhook, reads each secret from its variable, and checks every rule
/// of the tables; errors name the key and its line.
pub(super) fn prepare(config: &mut Config, text: &str) -> Result<(), BrokenRule> {
    let mut names = std::collections::HashSet::new();
    for (i, hook) in config.webhooks.iter_mut().enumerate() {
        let at = |span, key, problem: WebhookRule| BrokenRule::at(text, span, key, problem);
        if hook.name.is_empty() {
            hook.name = format!("webhook{}", i + 1);
        }
        if !names.insert(hook.name.clone()) {
            let problem = WebhookRule::DuplicateName(hook.name.clone());
            return Err(at(hook.tenant.span(), "webhook.name", problem));
        }
        if hook.tenant.get_ref().trim().is_empty() {
            return Err(at(
                hook.tenant.span(),
                "webhook.tenant",
                WebhookRule::NoTenant,
            ));
        }
        if hook.events.get_ref().is_empty() {
            return Err(at(
                hook.events.span(),
                "webhook.events",
                WebhookRule::NoEvents,
            ));
        }
        check_url(hook).map_err(|e| at(hook.url.span(), "webhook.url", e))?;
        if let Some(path) = &hook.ca_file {
            let certs = read_certs(path.get_ref());
            hook.ca_certs = certs.map_err(|e| at(path.span(), "webhook.ca_file", e))?;
        }
        let var = hook.secret_env.get_ref();
        match std::env::var(var) {
            Ok(secret) if !secret.trim().is_empty() => hook.secret = Secret(secret),
            _ => {
                let problem = WebhookRule::SecretNotSet(var.clone());
                return Err(at(hook.secret_env.span(), "webhook.secret_env", problem));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
