//! The keys of an SMTP client, shared by the kinds that speak SMTP to the next hop
//! (`smtp://`, `smtps://` and `mx://`): TLS, the EHLO name, and when to reconnect.

use serde::Deserialize;

use crate::config::smtp::DEFAULT_HOSTNAME;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamTls {
    None,
    #[default]
    Opportunistic,
    Required,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SmtpClient {
    #[serde(default)]
    pub tls: UpstreamTls,
    /// Name this relay gives itself in EHLO upstream; `Config::parse` sets it to
    /// `smtp.hostname` when the table leaves it out.
    pub helo_name: Option<String>,
    /// Reconnect after this many messages on one connection (0: no bound): providers behind
    /// load balancers ask for it.
    #[serde(default)]
    pub max_messages_per_connection: u64,
    /// Reconnect when a connection is older than this (0: no bound).
    #[serde(default)]
    pub max_connection_age_ms: u64,
}

impl SmtpClient {
    pub(super) const KEYS: &'static [&'static str] = &[
        "tls",
        "helo_name",
        "max_messages_per_connection",
        "max_connection_age_ms",
    ];

    /// The name given in EHLO.
    pub fn helo_name(&self) -> &str {
        self.helo_name.as_deref().unwrap_or(DEFAULT_HOSTNAME)
    }
}
