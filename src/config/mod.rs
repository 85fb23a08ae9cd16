//! The TOML configuration: plain data, parsed once, imported by everything and importing
//! nothing else of the crate.
//!
//! | file | section |
//! |---|---|
//! | `smtp.rs` | `[smtp]`, the listening side |
//! | `security.rs` | `[smtp.tls]` and `[smtp.auth]`: who may send |
//! | `senders.rs` | an AUTH user's `senders`: the addresses it may send as |
//! | `upstream/` | `[upstream]` / `[[upstream]]`: the keys every kind shares, and each kind's own |
//! | `route.rs` | `[[route]]`: which upstream carries a message |
//! | `replies.rs` | `throttle_replies` / `quota_replies`: regexes over upstream's replies |
//! | `throttle.rs` | `[[throttle]]` layers and their vocabulary (mode, refill, cost, store) |
//! | `key_source.rs` | where a layer's key comes from (`key = "header:X-Tenant"`) |
//! | `tenant.rs` | `[tenant]`: whose message it is (webhooks, the reputation guard, `{tenant}`) |
//! | `redis.rs` | `[redis]`, the store shared by replicas |
//! | `telemetry.rs` | `[telemetry]`, OTLP traces |
//! | `reputation.rs` | `[reputation]`: bounce and complaint rates per tenant, SES's events |
//! | `admin.rs` | `[admin]`, the admin HTTP endpoint and its bounds |
//! | `spool.rs` | `[spool]`: where hold-mode layers keep the messages they hold |
//! | `spool_store.rs` | `[spool]`'s store: a directory, or S3 and SQS (its keys and their rules) |
//! | `webhook.rs` | `[[webhook]]`: a tenant's events posted to its URL, signed |
//! | `network.rs` | which addresses are internal (refused to MX hosts and webhooks unless allowed) |
//!
//! Constraints live in the types (non-zero numbers, closed enums, URLs and key sources parsed
//! by `TryFrom`) so that a bad value is refused by the parser itself, whose error names the
//! line. The few rules that span several keys are checked in `validate`, which reports the line
//! of the offending key through `toml::Spanned`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

mod admin;
mod http_url;
mod key_source;
pub mod network;
mod redis;
mod replies;
mod reputation;
mod route;
mod security;
mod senders;
mod smtp;
mod spool;
mod spool_store;
mod telemetry;
mod tenant;
mod throttle;
mod upstream;
mod webhook;

pub use admin::AdminConfig;
pub use http_url::HttpUrl;
pub use key_source::{BadKeySource, KeySource, UnknownKeySource, MAX_KEY_BYTES};
pub use redis::{OnError, RedisConfig, RedisRule};
pub use replies::{BadReplyPattern, ReplyPatterns};
pub use reputation::{
    Action, ReputationConfig, ReputationKey, ReputationRule, SnsConfig, SqsConfig,
};
pub use route::{RouteConfig, RouteKey, RouteRule};
pub use security::{AuthConfig, PasswordHashError, SecurityRule, TlsConfig, UserConfig};
pub use senders::{BadSenderPattern, SenderPattern, Senders};
pub use smtp::{SmtpConfig, SmtpRule};
pub use spool::{SpoolConfig, SpoolRule, SpoolStore};
pub use spool_store::S3Settings;
pub use telemetry::TelemetryConfig;
pub use tenant::{BadTenantKey, TenantConfig, TenantKey, TenantRule};
pub use throttle::{
    Adapt, Cost, FairBy, LayerRule, Limit, MatchSpec, Mode, Refill, StoreKind, ThrottleConfig,
};
pub use upstream::{
    mailbox_allowed, ses_name, FileUpstream, Mailbox, MxKeys, MxUpstream, OauthConfig,
    OauthKeyError, OauthProvider, SesKeys, SesUpstream, SmtpClient, SmtpCredentials, SmtpUpstream,
    UpstreamAuth, UpstreamConfig, UpstreamKeyError, UpstreamKind, UpstreamTls, UpstreamUrlError,
    DEFAULT_NAME,
};
pub use webhook::{EventType, Secret, WebhookConfig, WebhookRule};

/// A configuration that could not be used; the text says which key and where.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The io error is said in this text and is no `source`: a chain printed whole (`main`
    /// prints `{:#}`) would say it twice.
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {error}")]
    Invalid { path: PathBuf, error: InvalidConfig },
}

/// Why a TOML document is no configuration.
#[derive(Debug, thiserror::Error)]
pub enum InvalidConfig {
    /// Not TOML, or a value its key's type refuses: toml's text names the key and shows the
    /// line.
    #[error("{0}")]
    Toml(toml::de::Error),
    /// A rule that spans keys, checked once the document is read.
    #[error("{0}")]
    Rule(#[from] BrokenRule),
}

/// A rule no single key's type can say, broken: the key it names, its line when one key
/// holds the fault, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("key `{key}`: {problem}{}", line.map_or(String::new(), |n| format!(" (at line {n})")))]
pub struct BrokenRule {
    pub key: &'static str,
    pub line: Option<usize>,
    pub problem: RuleProblem,
}

/// What is wrong, by the part of the file whose rule it breaks.
#[derive(Debug, thiserror::Error)]
pub enum RuleProblem {
    #[error(transparent)]
    Smtp(#[from] SmtpRule),
    #[error(transparent)]
    Security(#[from] SecurityRule),
    #[error(transparent)]
    PasswordHash(#[from] PasswordHashError),
    #[error(transparent)]
    Layer(#[from] LayerRule),
    #[error(transparent)]
    Route(#[from] RouteRule),
    #[error(transparent)]
    Redis(#[from] RedisRule),
    #[error(transparent)]
    Tenant(#[from] TenantRule),
    #[error(transparent)]
    Reputation(#[from] ReputationRule),
    #[error(transparent)]
    Spool(#[from] SpoolRule),
    #[error(transparent)]
    Webhook(#[from] WebhookRule),
}

impl BrokenRule {
    /// The rule of `key` broken at the line of `span` in `text`.
    fn at(
        text: &str,
        span: std::ops::Range<usize>,
        key: &'static str,
        problem: impl Into<RuleProblem>,
    ) -> BrokenRule {
        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
        BrokenRule {
            key,
            line: Some(line),
            problem: problem.into(),
        }
    }

    /// The rule of `key` broken where no one line holds the fault (a key left out).
    fn unlocated(key: &'static str, problem: impl Into<RuleProblem>) -> BrokenRule {
        BrokenRule {
            key,
            line: None,
            problem: problem.into(),
        }
    }
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
    /// Whose message it is; without the section `[reputation] key`'s when it has one, else
    /// the AUTH user's tenant.
    #[serde(default)]
    pub tenant: TenantConfig,
    /// The HTTP endpoint for health, metrics and peeks; off when the section is absent.
    pub admin: Option<AdminConfig>,
    /// The shared store of `store = "redis"` layers.
    pub redis: Option<RedisConfig>,
    /// OTLP traces of the messages; off when the section is absent.
    pub telemetry: Option<TelemetryConfig>,
    /// The tenant reputation guard; off when the section is absent.
    pub reputation: Option<ReputationConfig>,
    /// Where hold-mode layers keep messages; without it the relay stores none.
    pub spool: Option<SpoolConfig>,
    /// `[[webhook]]`: tenants' events posted to their URLs; none when absent.
    #[serde(rename = "webhook", default)]
    pub webhooks: Vec<WebhookConfig>,
}

impl Config {
    /// Reads, parses and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
            path: path.to_owned(),
            error,
        })?;
        Config::parse(&text).map_err(|error| ConfigError::Invalid {
            path: path.to_owned(),
            error,
        })
    }

    /// `[admin] password_hash_env`: the hash read from the environment, then checked as if
    /// written in the file (an error points at the variable's line).
    fn admin_hash_from_env(&mut self, text: &str) -> Result<(), BrokenRule> {
        let Some(admin) = &mut self.admin else {
            return Ok(());
        };
        let Some(var) = &admin.password_hash_env else {
            return Ok(());
        };
        let at = |problem| BrokenRule::at(text, var.span(), "admin.password_hash_env", problem);
        if admin.password_hash.is_some() {
            return Err(at(SecurityRule::AdminHashTwice));
        }
        let name = var.get_ref();
        let hash = std::env::var(name).map_err(|_| at(SecurityRule::EnvNotSet(name.clone())))?;
        admin.password_hash = Some(toml::Spanned::new(var.span(), hash.trim().to_string()));
        Ok(())
    }

    /// Parses and validates a TOML document; the error text names the key and the line.
    pub fn parse(text: &str) -> Result<Config, InvalidConfig> {
        let mut config: Config = toml::from_str(text).map_err(InvalidConfig::Toml)?;
        config.admin_hash_from_env(text)?;
        config.validate(text)?;
        tenant::inherit(&mut config);
        webhook::prepare(&mut config, text)?;
        for upstream in &mut config.upstreams {
            upstream.default_helo_name(&config.smtp.hostname);
        }
        Ok(config)
    }

    /// What is valid but probably not meant, for `mailsluice check` and the startup log.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = route::warnings(self);
        warnings.extend(self.smtp.warnings());
        warnings
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
    fn validate_account_limit(&self, layer: &ThrottleConfig, text: &str) -> Result<(), BrokenRule> {
        if layer.limit != Limit::Account {
            return Ok(());
        }
        let ses = (layer.upstream.as_ref())
            .and_then(|u| self.upstreams.iter().find(|c| c.name() == u.get_ref()))
            .is_some_and(|u| matches!(u.kind, UpstreamKind::Ses(_)));
        let problem = if layer.key != KeySource::None || !ses {
            LayerRule::AccountNotSesScoped
        } else if layer.refill != Refill::Drip || layer.adaptive == Some(true) {
            LayerRule::AccountLearned
        } else if layer.store != StoreKind::Local {
            LayerRule::AccountShared
        } else {
            return Ok(());
        };
        Err(BrokenRule::at(
            text,
            layer.name.span(),
            "throttle.limit",
            problem,
        ))
    }

    fn validate(&self, text: &str) -> Result<(), BrokenRule> {
        if self.smtp.listen.is_empty() && self.smtp.tls_listen.is_empty() {
            return Err(BrokenRule::unlocated("smtp.listen", SmtpRule::NoListener));
        }
        check_hostname(&self.smtp.hostname)?;
        security::validate(&self.smtp, text)?;
        let mut names = std::collections::HashSet::new();
        for layer in &self.throttle {
            if !names.insert(layer.name()) {
                return Err(BrokenRule::at(
                    text,
                    layer.name.span(),
                    "throttle.name",
                    LayerRule::DuplicateName,
                ));
            }
            validate_layer(layer, text)?;
            self.validate_account_limit(layer, text)?;
            if *layer.mode.get_ref() == Mode::Hold && self.spool.is_none() {
                let (key, rule) = ("throttle.mode", SpoolRule::HoldWithoutSpool);
                return Err(BrokenRule::at(text, layer.mode.span(), key, rule));
            }
        }
        route::validate(self, text)?;
        tenant::validate(&self.tenant)?;
        if let Some(hash) = self.admin.as_ref().and_then(|a| a.password_hash.as_ref()) {
            security::check_hash(hash.get_ref())
                .map_err(|e| BrokenRule::at(text, hash.span(), "admin.password_hash", e))?;
        }
        if let Some(reputation) = &self.reputation {
            reputation::validate(reputation, text)?;
            if *reputation.action.get_ref() == Action::Hold && self.spool.is_none() {
                let (span, rule) = (
                    reputation.action.span(),
                    SpoolRule::ReputationHoldWithoutSpool,
                );
                return Err(BrokenRule::at(text, span, "reputation.action", rule));
            }
        }
        if let Some(spool) = &self.spool {
            spool_store::validate_store(spool, text)?;
            spool::validate(spool, text)?;
        }
        redis::validate(self, text)
    }
}

/// The rules of one layer that no single key's type can say.
fn validate_layer(layer: &ThrottleConfig, text: &str) -> Result<(), BrokenRule> {
    if let Some(m) = &layer.match_ {
        if m.get_ref().header.trim().is_empty() || m.get_ref().value.trim().is_empty() {
            return Err(BrokenRule::at(
                text,
                m.span(),
                "throttle.match",
                LayerRule::MatchIncomplete,
            ));
        }
    }
    if layer.refill == Refill::FixedWindow
        && layer.burst.is_some_and(|b| b.get() != layer.limit.get())
    {
        return Err(BrokenRule::at(
            text,
            layer.name.span(),
            "throttle.burst",
            LayerRule::BurstInFixedWindow,
        ));
    }
    if layer.fair_by.is_none() && !layer.weights.is_empty() {
        return Err(BrokenRule::at(
            text,
            layer.name.span(),
            "throttle.weights",
            LayerRule::WeightsWithoutFairBy,
        ));
    }
    Ok(())
}

/// `smtp.hostname` is written in our `Received:` field and greeting: a domain (or address
/// literal) of plain ASCII, short enough that the field's lines stay far under 998 octets.
fn check_hostname(hostname: &str) -> Result<(), BrokenRule> {
    let ok = |c: char| c.is_ascii_alphanumeric() || ".-_[]:".contains(c);
    if hostname.is_empty() || hostname.len() > 253 || !hostname.chars().all(ok) {
        let problem = SmtpRule::NotHostname(hostname.to_string());
        return Err(BrokenRule::unlocated("smtp.hostname", problem));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
