//! `[upstream]`: where messages go, and how to reach it. The URL is parsed once, when the file
//! is read, so a typo is a startup error with its line.

use std::num::{NonZeroU64, NonZeroUsize};
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::replies::ReplyPatterns;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamTls {
    None,
    #[default]
    Opportunistic,
    Required,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// What routes and layers call it; a single `[upstream]` table may leave it out
    /// ("default"), each of several `[[upstream]]` tables needs one.
    pub name: Option<Spanned<String>>,
    /// `smtp://host:port`, `smtps://host:port` or `file://DIR`.
    pub url: UpstreamUrl,
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
    /// Reconnect after this many messages on one connection (0: no bound): providers behind
    /// load balancers ask for it.
    #[serde(default)]
    pub max_messages_per_connection: u64,
    /// Reconnect when a connection is older than this (0: no bound).
    #[serde(default)]
    pub max_connection_age_ms: u64,
    /// Replies that mean "too fast": the message is sent again later, adaptive layers slow.
    #[serde(default = "ReplyPatterns::default_throttle")]
    pub throttle_replies: ReplyPatterns,
    /// Replies that mean "no more today": the upstream is paused for `quota_pause_ms`.
    #[serde(default = "ReplyPatterns::default_quota")]
    pub quota_replies: ReplyPatterns,
    #[serde(default = "default_quota_pause_ms")]
    pub quota_pause_ms: NonZeroU64,
}

/// What an upstream refusal says about sending, beyond this one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// Sending too fast (SES `454 ... Maximum sending rate exceeded`).
    Rate,
    /// Too many connections open to it (a `421` that `throttle_replies` matches).
    Connections,
    /// The sending quota is used up.
    Quota,
}

impl Feedback {
    pub fn as_str(self) -> &'static str {
        match self {
            Feedback::Rate => "rate",
            Feedback::Connections => "connections",
            Feedback::Quota => "quota",
        }
    }
}

impl UpstreamConfig {
    /// The name routes and layers use.
    pub fn name(&self) -> &str {
        self.name.as_ref().map_or(DEFAULT_NAME, |n| n.get_ref())
    }

    /// What upstream's reply `code text` (enhanced code included in `text`) signals, if
    /// anything. Quota is checked first: its SES text is a "throttling failure" too.
    pub fn classify(&self, code: u16, text: &str) -> Option<Feedback> {
        if !(400..500).contains(&code) {
            return None;
        }
        let reply = format!("{code} {text}");
        if self.quota_replies.matches(&reply) {
            Some(Feedback::Quota)
        } else if self.throttle_replies.matches(&reply) {
            Some(if code == 421 {
                Feedback::Connections
            } else {
                Feedback::Rate
            })
        } else {
            None
        }
    }
}

/// The name of an `[upstream]` table that has none.
pub const DEFAULT_NAME: &str = "default";

/// `upstream` as one table (`[upstream]`) or several (`[[upstream]]`). A visitor rather than an
/// untagged enum, so that an error inside a table keeps its key and line.
pub(super) fn one_or_many<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<UpstreamConfig>, D::Error> {
    struct OneOrMany;

    impl<'de> Visitor<'de> for OneOrMany {
        type Value = Vec<UpstreamConfig>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an [upstream] table or [[upstream]] tables")
        }

        fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<Self::Value, M::Error> {
            let one = UpstreamConfig::deserialize(de::value::MapAccessDeserializer::new(map))?;
            Ok(vec![one])
        }

        fn visit_seq<S: SeqAccess<'de>>(self, seq: S) -> Result<Self::Value, S::Error> {
            Vec::deserialize(de::value::SeqAccessDeserializer::new(seq))
        }
    }

    deserializer.deserialize_any(OneOrMany)
}

fn default_quota_pause_ms() -> NonZeroU64 {
    NonZeroU64::new(900_000).unwrap()
}

fn default_pool_size() -> NonZeroUsize {
    NonZeroUsize::new(16).unwrap()
}
fn default_upstream_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(60_000).unwrap()
}

/// The parsed `[upstream] url`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum UpstreamUrl {
    /// `smtp://host:port`: plain connection, STARTTLS per `tls`.
    Smtp { host: String, port: u16 },
    /// `smtps://host:port`: TLS from the first byte (port 465).
    Smtps { host: String, port: u16 },
    /// `file://DIR`: one `.eml` per message, the embedded default.
    File { dir: PathBuf },
}

impl TryFrom<String> for UpstreamUrl {
    type Error = String;

    fn try_from(url: String) -> Result<UpstreamUrl, String> {
        UpstreamUrl::parse(&url).map_err(|e| format!("key `upstream.url`: {e}"))
    }
}

impl std::fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = |h: &str| match h.contains(':') {
            true => format!("[{h}]"),
            false => h.to_string(),
        };
        match self {
            UpstreamUrl::Smtp { host: h, port } => write!(f, "smtp://{}:{port}", host(h)),
            UpstreamUrl::Smtps { host: h, port } => write!(f, "smtps://{}:{port}", host(h)),
            UpstreamUrl::File { dir } => write!(f, "file://{}", dir.display()),
        }
    }
}

impl UpstreamUrl {
    pub fn parse(url: &str) -> Result<UpstreamUrl, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("`{url}` is not a URL (smtp://, smtps:// or file://)"))?;
        match scheme {
            "file" if !rest.is_empty() => Ok(UpstreamUrl::File { dir: rest.into() }),
            "smtp" | "smtps" => {
                let default_port = if scheme == "smtp" { 25 } else { 465 };
                let (host, port) = split_host_port(rest.trim_end_matches('/'), default_port)?;
                Ok(if scheme == "smtp" {
                    UpstreamUrl::Smtp { host, port }
                } else {
                    UpstreamUrl::Smtps { host, port }
                })
            }
            _ => Err(format!(
                "`{url}`: scheme must be smtp://, smtps:// or file://DIR"
            )),
        }
    }
}

fn split_host_port(authority: &str, default_port: u16) -> Result<(String, u16), String> {
    if authority.is_empty() {
        return Err("missing host".into());
    }
    // Bracketed IPv6 literal: [::1]:25
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or("unclosed [ in host")?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| format!("bad port `{p}`"))?,
            None => default_port,
        };
        return Ok((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, p)) => Ok((
            host.to_string(),
            p.parse().map_err(|_| format!("bad port `{p}`"))?,
        )),
        None => Ok((authority.to_string(), default_port)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_default_ports() {
        assert_eq!(
            UpstreamUrl::parse("smtp://email-smtp.eu-west-1.amazonaws.com:587").unwrap(),
            UpstreamUrl::Smtp {
                host: "email-smtp.eu-west-1.amazonaws.com".into(),
                port: 587
            }
        );
        assert_eq!(
            UpstreamUrl::parse("smtps://mail.example").unwrap(),
            UpstreamUrl::Smtps {
                host: "mail.example".into(),
                port: 465
            }
        );
        assert_eq!(
            UpstreamUrl::parse("smtp://[::1]:2526").unwrap(),
            UpstreamUrl::Smtp {
                host: "::1".into(),
                port: 2526
            }
        );
        assert_eq!(
            UpstreamUrl::parse("file://outbox").unwrap(),
            UpstreamUrl::File {
                dir: "outbox".into()
            }
        );
        assert!(UpstreamUrl::parse("gopher://x").is_err());
        assert!(UpstreamUrl::parse("smtp://host:notaport").is_err());
    }
}
