//! The TOML configuration. Constraints live in the types (non-zero numbers, closed enums,
//! required fields) so that a bad value is refused by the parser itself, whose error names
//! the key and the line. The few rules that span several keys are checked in `validate`,
//! which reports the line of the offending key through `toml::Spanned`.

use std::net::SocketAddr;
use std::num::{NonZeroU64, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;

mod redis;
pub use redis::{OnErrorConfig, RedisConfig};
use serde::Deserialize;
use toml::Spanned;

mod security;
pub use security::{AuthConfig, TlsConfig, UserConfig};

/// A configuration that could not be used; the text says which key and where.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub smtp: SmtpConfig,
    pub upstream: UpstreamConfig,
    #[serde(default)]
    pub throttle: Vec<ThrottleConfig>,
    /// The HTTP endpoint for health, metrics and peeks; off when the section is absent.
    pub admin: Option<AdminConfig>,
    /// The shared store of `store = "redis"` layers.
    pub redis: Option<RedisConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default = "default_admin_listen")]
    pub listen: SocketAddr,
}

fn default_admin_listen() -> SocketAddr {
    "127.0.0.1:9325".parse().unwrap()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpConfig {
    pub listen: Vec<SocketAddr>,
    #[serde(default = "default_hostname")]
    pub hostname: String,
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: NonZeroUsize,
    #[serde(default = "default_max_recipients")]
    pub max_recipients: NonZeroUsize,
    #[serde(default = "default_max_connections")]
    pub max_connections: NonZeroUsize,
    /// Longest command or data line, CRLF included. RFC 5321 4.5.3.1.6 asks for at least
    /// 1000 for text lines; we default higher because real mail has longer lines.
    #[serde(default = "default_max_line_bytes")]
    pub max_line_bytes: NonZeroUsize,
    /// Seconds a client may stay silent before `421 4.4.2`. RFC 5321 4.5.3.2.7 suggests 5
    /// minutes for a server.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: NonZeroU64,
    /// Time given to transactions in flight at SIGTERM before the process exits anyway.
    #[serde(default = "default_shutdown_grace_ms")]
    pub shutdown_grace_ms: u64,
    /// Clients allowed to relay without AUTH. Absent means loopback only.
    #[serde(default = "default_trusted_networks")]
    pub trusted_networks: Vec<IpNet>,
    // The security keys (their types and rules are in `config/security.rs`).
    /// Addresses for implicit TLS (SMTPS, RFC 8314; port 465). Needs `[smtp.tls]`.
    #[serde(default)]
    pub tls_listen: Vec<SocketAddr>,
    pub tls: Option<TlsConfig>,
    pub auth: Option<AuthConfig>,
    /// Offer AUTH on a connection without TLS. Off: a password must never cross in clear.
    #[serde(default)]
    pub allow_plaintext_auth: bool,
    /// Error replies (5xx to commands) one session may get before `421 4.7.0` and close.
    #[serde(default = "default_max_errors")]
    pub max_errors: NonZeroUsize,
    /// Deadline for a whole DATA section, from `354` to the final dot; past it `421 4.4.2`.
    #[serde(default = "default_data_timeout_ms")]
    pub data_timeout_ms: NonZeroU64,
    /// Connections one client address (an IPv6 /64) may hold; past it `421 4.7.0`.
    #[serde(default = "default_max_connections_per_ip")]
    pub max_connections_per_ip: NonZeroUsize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamTls {
    None,
    #[default]
    Opportunistic,
    Required,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `smtp://host:port`, `smtps://host:port` or `file://DIR`.
    pub url: Spanned<String>,
    #[serde(default)]
    pub tls: UpstreamTls,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Name of the environment variable that holds the password, so it stays out of files.
    pub password_env: Option<String>,
    #[serde(default = "default_pool_size")]
    pub pool_size: NonZeroUsize,
    /// Timeout for connecting and for each SMTP command upstream.
    #[serde(default = "default_upstream_timeout_ms")]
    pub timeout_ms: NonZeroU64,
    /// Name this relay gives itself in EHLO upstream; defaults to `smtp.hostname`.
    pub helo_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cost {
    Recipients,
    Message,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Wait,
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Refill {
    #[default]
    Drip,
    FixedWindow,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Local,
    Redis,
}

/// A layer applies only to messages whose header `header` equals `value` (case-insensitive).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    pub header: String,
    pub value: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottleConfig {
    pub name: Spanned<String>,
    pub key: Spanned<String>,
    #[serde(default = "default_key")]
    pub default_key: String,
    #[serde(default = "default_cost")]
    pub cost: Cost,
    pub limit: NonZeroU64,
    #[serde(default = "default_interval_ms")]
    pub interval_ms: NonZeroU64,
    pub burst: Option<NonZeroU64>,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default = "default_max_wait_ms")]
    pub max_wait_ms: u64,
    #[serde(default = "default_max_queue")]
    pub max_queue: NonZeroUsize,
    #[serde(default = "default_max_keys")]
    pub max_keys: NonZeroUsize,
    #[serde(default)]
    pub refill: Refill,
    #[serde(default = "default_idle_ttl_ms")]
    pub idle_ttl_ms: NonZeroU64,
    #[serde(rename = "match")]
    pub match_: Option<Spanned<MatchSpec>>,
    #[serde(default)]
    pub store: StoreKind,
    #[serde(default)]
    pub charge_failures: bool,
    #[serde(default = "default_true")]
    pub strip_key_header: bool,
}

impl ThrottleConfig {
    pub fn burst(&self) -> u64 {
        self.burst.unwrap_or(self.limit).get()
    }

    /// The layer as the throttle engine sees it.
    pub fn spec(&self) -> crate::throttle::LayerSpec {
        use crate::throttle;
        crate::throttle::LayerSpec {
            name: self.name.get_ref().clone(),
            limit: self.limit.get(),
            interval: Duration::from_millis(self.interval_ms.get()),
            burst: self.burst(),
            mode: match self.mode {
                Mode::Wait => throttle::Mode::Wait,
                Mode::Reject => throttle::Mode::Reject,
            },
            max_wait: Duration::from_millis(self.max_wait_ms),
            max_queue: self.max_queue.get(),
            max_keys: self.max_keys.get(),
            refill: match self.refill {
                Refill::Drip => throttle::Refill::Drip,
                Refill::FixedWindow => throttle::Refill::FixedWindow,
                Refill::None => throttle::Refill::None,
            },
            idle_ttl: Duration::from_millis(self.idle_ttl_ms.get()),
            charge_failures: self.charge_failures,
        }
    }
}

fn default_hostname() -> String {
    "mailsluice.localhost".into()
}
fn default_max_message_bytes() -> NonZeroUsize {
    NonZeroUsize::new(26_214_400).unwrap()
}
fn default_max_recipients() -> NonZeroUsize {
    NonZeroUsize::new(100).unwrap()
}
fn default_max_connections() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap()
}
fn default_max_line_bytes() -> NonZeroUsize {
    NonZeroUsize::new(4096).unwrap()
}
fn default_idle_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(300_000).unwrap()
}
fn default_shutdown_grace_ms() -> u64 {
    30_000
}
fn default_trusted_networks() -> Vec<IpNet> {
    vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]
}
fn default_max_errors() -> NonZeroUsize {
    NonZeroUsize::new(20).unwrap()
}
fn default_data_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(600_000).unwrap()
}
fn default_max_connections_per_ip() -> NonZeroUsize {
    NonZeroUsize::new(1000).unwrap()
}
fn default_pool_size() -> NonZeroUsize {
    NonZeroUsize::new(16).unwrap()
}
fn default_upstream_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(60_000).unwrap()
}
fn default_key() -> String {
    "default".into()
}
fn default_cost() -> Cost {
    Cost::Recipients
}
fn default_interval_ms() -> NonZeroU64 {
    NonZeroU64::new(1000).unwrap()
}
fn default_max_wait_ms() -> u64 {
    25_000
}
fn default_max_queue() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap()
}
fn default_max_keys() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap()
}
fn default_idle_ttl_ms() -> NonZeroU64 {
    NonZeroU64::new(604_800_000).unwrap()
}
fn default_true() -> bool {
    true
}

impl Config {
    /// Reads, parses and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses and validates a TOML document; the error text names the key and the line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate(text)?;
        Ok(config)
    }

    fn validate(&self, text: &str) -> Result<(), String> {
        if self.smtp.listen.is_empty() && self.smtp.tls_listen.is_empty() {
            return Err("key `smtp.listen`: at least one address is needed".into());
        }
        security::validate(&self.smtp, text)?;
        crate::upstream::UpstreamUrl::parse(self.upstream.url.get_ref()).map_err(|e| {
            located(
                text,
                self.upstream.url.span(),
                &format!("key `upstream.url`: {e}"),
            )
        })?;
        let mut names = std::collections::HashSet::new();
        for layer in &self.throttle {
            let span = layer.name.span();
            if !names.insert(layer.name.get_ref().clone()) {
                return Err(located(
                    text,
                    span,
                    "key `throttle.name`: duplicate layer name",
                ));
            }
            crate::policy::KeySource::parse(layer.key.get_ref()).map_err(|e| {
                located(text, layer.key.span(), &format!("key `throttle.key`: {e}"))
            })?;
            if let Some(m) = &layer.match_ {
                if m.get_ref().header.trim().is_empty() || m.get_ref().value.trim().is_empty() {
                    return Err(located(
                        text,
                        m.span(),
                        "key `throttle.match`: needs a header name and a value to compare",
                    ));
                }
            }
            if layer.refill == Refill::FixedWindow && layer.burst.is_some_and(|b| b != layer.limit)
            {
                return Err(located(
                    text,
                    span,
                    "key `throttle.burst`: a fixed_window layer holds `limit`; leave burst out",
                ));
            }
        }
        redis::validate(self, text)
    }
}

/// Formats `message` with the line of `span` in `text`, as the parser's own errors do.
fn located(text: &str, span: std::ops::Range<usize>, message: &str) -> String {
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    format!("{message} (at line {line})")
}

#[cfg(test)]
mod tests;
