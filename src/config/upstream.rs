//! `[upstream]`: where messages go, and how to reach it. The URL is parsed once, when the file
//! is read, so a typo is a startup error with its line.

use std::net::SocketAddr;
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

/// Parsed by serde's derive (`remote = "Self"`) and then checked by [`UpstreamConfig::validate`]
/// in its `Deserialize`, so a rule between keys is a parse error with the table's line.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct UpstreamConfig {
    /// What routes and layers call it; a single `[upstream]` table may leave it out
    /// ("default"), each of several `[[upstream]]` tables needs one.
    pub name: Option<Spanned<String>>,
    /// `smtp://host:port`, `smtps://host:port`, `mx://` or `file://DIR`.
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
    /// `mx://` only: the port of the MX hosts (default 25; tests use another). Unset keys
    /// stay `None`, so a key given to another kind of upstream is an error, not ignored.
    pub mx_port: Option<u16>,
    /// `mx://` only: ask these name servers (`ip:port`, UDP and TCP) instead of the system's.
    pub nameservers: Option<Vec<SocketAddr>>,
    /// `mx://` only: connections in use at once to one recipient domain (default 10), so a
    /// burst to one domain does not look like an attack to its servers.
    pub max_connections_per_domain: Option<NonZeroUsize>,
}

impl<'de> Deserialize<'de> for UpstreamConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let config = UpstreamConfig::deserialize(deserializer)?;
        config.validate().map_err(serde::de::Error::custom)?;
        Ok(config)
    }
}

impl UpstreamConfig {
    /// The name routes and layers use.
    pub fn name(&self) -> &str {
        self.name.as_ref().map_or(DEFAULT_NAME, |n| n.get_ref())
    }

    pub fn mx_port(&self) -> u16 {
        self.mx_port.unwrap_or(25)
    }

    pub fn max_connections_per_domain(&self) -> NonZeroUsize {
        self.max_connections_per_domain
            .unwrap_or(NonZeroUsize::new(10).unwrap())
    }

    /// The rules between keys that no key's type can say: the `mx://` keys belong to it
    /// alone, and MX hosts take no credentials (they are not our smarthost).
    pub fn validate(&self) -> Result<(), String> {
        self.validate_keys().map_err(|e| match &self.name {
            Some(name) => format!("{e} (upstream {:?})", name.get_ref()),
            None => e,
        })
    }

    fn validate_keys(&self) -> Result<(), String> {
        let mx = matches!(self.url, UpstreamUrl::Mx);
        let mx_only = [
            ("mx_port", self.mx_port.is_some()),
            ("nameservers", self.nameservers.is_some()),
            (
                "max_connections_per_domain",
                self.max_connections_per_domain.is_some(),
            ),
        ];
        if let Some((key, _)) = mx_only.iter().find(|(_, set)| *set && !mx) {
            return Err(format!(
                "key `upstream.{key}`: only for url = \"mx://\", not `{}`",
                self.url
            ));
        }
        if !mx {
            return Ok(());
        }
        if self.mx_port == Some(0) {
            return Err("key `upstream.mx_port`: must be a port, 1 to 65535".into());
        }
        if self.nameservers.as_ref().is_some_and(Vec::is_empty) {
            return Err("key `upstream.nameservers`: give at least one `ip:port`, or leave it out for the system's".into());
        }
        let credentials = [
            ("username", self.username.is_some()),
            ("password", self.password.is_some()),
            ("password_env", self.password_env.is_some()),
        ];
        if let Some((key, _)) = credentials.iter().find(|(_, set)| *set) {
            return Err(format!(
                "key `upstream.{key}`: not used with url = \"mx://\" (MX hosts take no AUTH)"
            ));
        }
        Ok(())
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
            let one = <UpstreamConfig as Deserialize>::deserialize(
                de::value::MapAccessDeserializer::new(map),
            )?;
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
    /// `mx://`: straight to each recipient domain's MX hosts.
    Mx,
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
            UpstreamUrl::Mx => write!(f, "mx://"),
        }
    }
}

impl UpstreamUrl {
    pub fn parse(url: &str) -> Result<UpstreamUrl, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("`{url}` is not a URL (smtp://, smtps://, mx:// or file://)"))?;
        match scheme {
            "file" if !rest.is_empty() => Ok(UpstreamUrl::File { dir: rest.into() }),
            "mx" if rest.is_empty() || rest == "/" => Ok(UpstreamUrl::Mx),
            "mx" => Err(format!(
                "`{url}`: mx:// takes no host (the recipients' domains are the hosts)"
            )),
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
                "`{url}`: scheme must be smtp://, smtps://, mx:// or file://DIR"
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
        assert_eq!(UpstreamUrl::parse("mx://").unwrap(), UpstreamUrl::Mx);
        assert_eq!(UpstreamUrl::Mx.to_string(), "mx://");
        assert!(UpstreamUrl::parse("mx://example.com").is_err());
        assert!(UpstreamUrl::parse("gopher://x").is_err());
        assert!(UpstreamUrl::parse("smtp://host:notaport").is_err());
    }

    #[test]
    fn mx_keys_have_defaults_and_belong_to_mx_alone() {
        let parse = |text: &str| toml::from_str::<UpstreamConfig>(text);
        let mx = parse("url = \"mx://\"").unwrap();
        assert_eq!(
            (mx.mx_port(), mx.max_connections_per_domain().get()),
            (25, 10)
        );
        let set =
            parse("url = \"mx://\"\nmx_port = 2525\nnameservers = [\"127.0.0.1:5353\"]").unwrap();
        assert_eq!(set.mx_port(), 2525);
        assert_eq!(
            set.nameservers,
            Some(vec!["127.0.0.1:5353".parse().unwrap()])
        );
        for (key, text) in [
            ("mx_port", "url = \"smtp://h:25\"\nmx_port = 2525"),
            (
                "nameservers",
                "url = \"file://x\"\nnameservers = [\"127.0.0.1:53\"]",
            ),
            (
                "max_connections_per_domain",
                "url = \"smtp://h:25\"\nmax_connections_per_domain = 2",
            ),
            (
                "username",
                "url = \"mx://\"\nusername = \"u\"\npassword = \"p\"",
            ),
            ("nameservers", "url = \"mx://\"\nnameservers = []"),
            ("mx_port", "url = \"mx://\"\nmx_port = 0"),
        ] {
            // Checked when parsed, and by `validate` for a config built otherwise.
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(&format!("upstream.{key}")), "{text}: {err}");
            let unchecked = UpstreamConfig::deserialize(toml::Deserializer::new(text)).unwrap();
            assert!(unchecked.validate().unwrap_err().contains(key), "{text}");
        }
        assert!(parse("url = \"mx://\"\nnameservers = [\"nope\"]").is_err());
    }
}
