//! `[redis]`: the shared store of the layers with `store = "redis"` (several replicas, one
//! limit). Kept apart from the rest of the schema because only those layers need it.

use std::num::NonZeroU64;

use serde::Deserialize;
use toml::Spanned;

mod rules;

pub(super) use rules::validate;
pub use rules::RedisRule;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`, `rediss://...` (TLS) or `unix:///path`.
    pub url: Option<Spanned<String>>,
    /// Redis Cluster: `urls` are seed nodes (any few of the cluster's).
    #[serde(default)]
    pub cluster: bool,
    #[serde(default)]
    pub urls: Vec<Spanned<String>>,
    /// Redis Sentinel: the sentinels tell which server is the primary (instead of `url`).
    pub sentinel: Option<Spanned<SentinelConfig>>,
    /// Name of the environment variable holding the password (instead of in the URL).
    pub password_env: Option<Spanned<String>>,
    /// Longest wait for one Redis command, connecting included; past it, `on_error` answers.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: NonZeroU64,
    #[serde(default)]
    pub on_error: OnError,
    /// Put in front of every key, so several deployments can share one Redis.
    #[serde(default = "default_prefix")]
    pub prefix: String,
}

/// `sentinel = { master = "mymaster", nodes = ["host:26379", ...] }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelConfig {
    /// The name the sentinels monitor the primary under.
    pub master: String,
    /// The sentinels, `host:port` each.
    pub nodes: Vec<String>,
    /// Name of the environment variable holding the sentinels' own password, if they ask
    /// for one (the primary's is `password_env`).
    pub password_env: Option<String>,
}

impl SentinelConfig {
    /// The nodes as `(host, port)`; validation has refused any other form.
    pub fn nodes(&self) -> impl Iterator<Item = (String, u16)> + '_ {
        self.nodes.iter().filter_map(|n| host_port(n))
    }
}

/// `host:port`, as a sentinel node is written.
pub(super) fn host_port(node: &str) -> Option<(String, u16)> {
    let (host, port) = node.rsplit_once(':')?;
    let port = port.parse().ok().filter(|&p| p != 0)?;
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// What a shared layer does when its store cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// In-process buckets, with a warning.
    #[default]
    Local,
    /// `451 4.4.3`.
    Reject,
    /// Through, unmetered, with a warning.
    Allow,
}

impl OnError {
    /// As written in the config (and the `on_error` label of the metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Local => "local",
            OnError::Reject => "reject",
            OnError::Allow => "allow",
        }
    }
}

fn default_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(1000).unwrap()
}
fn default_prefix() -> String {
    "mailsluice:".into()
}

impl RedisConfig {
    /// Every URL given, `url` first.
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.url
            .iter()
            .chain(&self.urls)
            .map(|u| u.get_ref().as_str())
    }
}
