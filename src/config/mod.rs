//! The TOML configuration: plain data, parsed once, imported by everything and importing
//! nothing else of the crate.
//!
//! | file | section |
//! |---|---|
//! | `smtp.rs` | `[smtp]`, the listening side |
//! | `security.rs` | `[smtp.tls]` and `[smtp.auth]`: who may send |
//! | `upstream/` | `[upstream]` / `[[upstream]]`: the keys every kind shares, and each kind's own |
//! | `route.rs` | `[[route]]`: which upstream carries a message |
//! | `replies.rs` | `throttle_replies` / `quota_replies`: regexes over upstream's replies |
//! | `throttle.rs` | `[[throttle]]` layers and their vocabulary (mode, refill, cost, store) |
//! | `key_source.rs` | where a layer's key comes from (`key = "header:X-Tenant"`) |
//! | `redis.rs` | `[redis]`, the store shared by replicas |
//! | `telemetry.rs` | `[telemetry]`, OTLP traces |
//! | `reputation.rs` | `[reputation]`: bounce and complaint rates per tenant, SES's events |
//!
//! Constraints live in the types (non-zero numbers, closed enums, URLs and key sources parsed
//! by `TryFrom`) so that a bad value is refused by the parser itself, whose error names the
//! line. The few rules that span several keys are checked in `validate`, which reports the line
//! of the offending key through `toml::Spanned`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

mod key_source;
mod redis;
mod replies;
mod reputation;
mod route;
mod security;
mod smtp;
mod telemetry;
mod throttle;
mod upstream;

pub use key_source::{KeySource, MAX_KEY_BYTES};
pub use redis::{OnError, RedisConfig};
pub use replies::ReplyPatterns;
pub use reputation::{Action, ReputationConfig, ReputationKey, SnsConfig, SqsConfig};
pub use route::{RouteConfig, RouteKey};
pub use security::{AuthConfig, TlsConfig, UserConfig};
pub use smtp::SmtpConfig;
pub use telemetry::TelemetryConfig;
pub use throttle::{
    Adapt, Cost, FairBy, Limit, MatchSpec, Mode, Refill, StoreKind, ThrottleConfig,
};
pub use upstream::{
    FileUpstream, MxKeys, MxUpstream, SesKeys, SesUpstream, SmtpClient, SmtpCredentials,
    SmtpUpstream, UpstreamConfig, UpstreamKind, UpstreamTls, DEFAULT_NAME,
};

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
    /// `[upstream]`, or several `[[upstream]]`; without routes every message takes the first.
    #[serde(rename = "upstream", deserialize_with = "upstream::one_or_many")]
    pub upstreams: Vec<UpstreamConfig>,
    /// `[[route]]`, first match wins.
    #[serde(rename = "route", default)]
    pub routes: Vec<RouteConfig>,
    #[serde(default)]
    pub throttle: Vec<ThrottleConfig>,
    /// The HTTP endpoint for health, metrics and peeks; off when the section is absent.
    pub admin: Option<AdminConfig>,
    /// The shared store of `store = "redis"` layers.
    pub redis: Option<RedisConfig>,
    /// OTLP traces of the messages; off when the section is absent.
    pub telemetry: Option<TelemetryConfig>,
    /// The tenant reputation guard; off when the section is absent.
    pub reputation: Option<ReputationConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default = "default_admin_listen")]
    pub listen: SocketAddr,
    /// An argon2 PHC string: when set, every path but `/healthz`, `/readyz` and the SNS
    /// endpoint asks for HTTP Basic authentication; without it, the paths that change state
    /// answer 403.
    pub password_hash: Option<toml::Spanned<String>>,
}

fn default_admin_listen() -> SocketAddr {
    "127.0.0.1:9325".parse().unwrap()
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
        let mut config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate(text)?;
        for upstream in &mut config.upstreams {
            upstream.default_helo_name(&config.smtp.hostname);
        }
        Ok(config)
    }

    /// What is valid but probably not meant, for `mailsluice check` and the startup log.
    pub fn warnings(&self) -> Vec<String> {
        route::warnings(self)
    }

    /// The largest message taken at `MAIL ... SIZE=` and offered in EHLO: `max_message_bytes`,
    /// or less when every upstream a message can be routed to has a smaller bound of its own
    /// (SES's API: 40 MB). When routes lead to kinds with and without one, the bound is only
    /// known at the final dot, where the forwarder applies it.
    pub fn max_message_bytes(&self) -> usize {
        let own = self.smtp.max_message_bytes.get();
        let bound = |name: &str| {
            (self.upstreams.iter().find(|u| u.name() == name))
                .and_then(|u| u.kind.max_message_bytes())
        };
        let bounds: Option<Vec<usize>> = match self.routes.is_empty() {
            true => (self.upstreams.first())
                .and_then(|u| u.kind.max_message_bytes())
                .map(|b| vec![b]),
            false => (self.routes.iter())
                .flat_map(|r| std::iter::once(&r.upstream).chain(&r.fallback))
                .map(|name| bound(name.get_ref()))
                .collect(),
        };
        bounds
            .and_then(|b| b.into_iter().max())
            .map_or(own, |b| b.min(own))
    }

    /// The layer called `name`.
    pub fn layer(&self, name: &str) -> Option<&ThrottleConfig> {
        self.throttle.iter().find(|l| l.name() == name)
    }

    /// `limit = "account"` only where one SES account's rate is meant: a `key = "none"` drip
    /// layer scoped to a `ses://` upstream, in process, not adaptive.
    fn validate_account_limit(&self, layer: &ThrottleConfig, text: &str) -> Result<(), String> {
        if layer.limit != Limit::Account {
            return Ok(());
        }
        let ses = (layer.upstream.as_ref())
            .and_then(|u| self.upstreams.iter().find(|c| c.name() == u.get_ref()))
            .is_some_and(|u| matches!(u.kind, UpstreamKind::Ses(_)));
        let why = if layer.key != KeySource::None || !ses {
            "only a `key = \"none\"` layer scoped (`upstream`) to a ses:// upstream"
        } else if layer.refill != Refill::Drip || layer.adaptive == Some(true) {
            "only a drip layer that does not learn (`adaptive`)"
        } else if layer.store != StoreKind::Local {
            "only an in-process layer (`store = \"local\"`)"
        } else {
            return Ok(());
        };
        let message = format!("key `throttle.limit`: \"account\" is for {why}");
        Err(located(text, layer.name.span(), &message))
    }

    fn validate(&self, text: &str) -> Result<(), String> {
        if self.smtp.listen.is_empty() && self.smtp.tls_listen.is_empty() {
            return Err("key `smtp.listen`: at least one address is needed".into());
        }
        check_hostname(&self.smtp.hostname)?;
        security::validate(&self.smtp, text)?;
        let mut names = std::collections::HashSet::new();
        for layer in &self.throttle {
            if !names.insert(layer.name()) {
                return Err(located(
                    text,
                    layer.name.span(),
                    "key `throttle.name`: duplicate layer name",
                ));
            }
            validate_layer(layer, text)?;
            self.validate_account_limit(layer, text)?;
        }
        route::validate(self, text)?;
        if let Some(hash) = self.admin.as_ref().and_then(|a| a.password_hash.as_ref()) {
            security::check_hash(hash.get_ref()).map_err(|e| {
                located(
                    text,
                    hash.span(),
                    &format!("key `admin.password_hash`: {e}"),
                )
            })?;
        }
        if let Some(reputation) = &self.reputation {
            reputation::validate(reputation, text)?;
        }
        redis::validate(self, text)
    }
}

/// The rules of one layer that no single key's type can say.
fn validate_layer(layer: &ThrottleConfig, text: &str) -> Result<(), String> {
    if let Some(m) = &layer.match_ {
        if m.get_ref().header.trim().is_empty() || m.get_ref().value.trim().is_empty() {
            return Err(located(
                text,
                m.span(),
                "key `throttle.match`: needs a header name and a value to compare",
            ));
        }
    }
    if layer.refill == Refill::FixedWindow
        && layer.burst.is_some_and(|b| b.get() != layer.limit.get())
    {
        return Err(located(
            text,
            layer.name.span(),
            "key `throttle.burst`: a fixed_window layer holds `limit`; leave burst out",
        ));
    }
    if layer.fair_by.is_none() && !layer.weights.is_empty() {
        return Err(located(
            text,
            layer.name.span(),
            "key `throttle.weights`: weights share the turns of `fair_by`; set it",
        ));
    }
    Ok(())
}

/// `smtp.hostname` is written in our `Received:` field and greeting: a domain (or address
/// literal) of plain ASCII, short enough that the field's lines stay far under 998 octets.
fn check_hostname(hostname: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || ".-_[]:".contains(c);
    if hostname.is_empty() || hostname.len() > 253 || !hostname.chars().all(ok) {
        return Err(format!(
            "key `smtp.hostname`: {hostname:?} is not a domain name (ASCII letters, digits, \
             `.`, `-`, at most 253 characters)"
        ));
    }
    Ok(())
}

/// Formats `message` with the line of `span` in `text`, as the parser's own errors do.
fn located(text: &str, span: std::ops::Range<usize>, message: &str) -> String {
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    format!("{message} (at line {line})")
}

#[cfg(test)]
mod tests;
