//! `[upstream]` / `[[upstream]]`: where messages go, and how to reach it. The keys every kind
//! shares are here; the URL's scheme picks the kind (`kind.rs`), whose own keys live in the
//! file named after it (`file.rs`, `smtp.rs`, `mx.rs`, `ses.rs`; `smtp_client.rs` for the keys of an
//! SMTP client that `smtp://` and `mx://` share; `oauth.rs` for `smtp://`'s XOAUTH2 login). The URL is parsed once, when the file is
//! read, so a typo is a startup error with its line.

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::replies::ReplyPatterns;

mod file;
mod keys;
mod kind;
mod mx;
mod oauth;
mod ses;
mod smtp;
mod smtp_client;

pub use file::FileUpstream;
pub use kind::UpstreamKind;
pub use mx::{MxKeys, MxUpstream};
pub use oauth::{
    mailbox_allowed, Mailbox, OauthConfig, OauthKeyError, OauthProvider, UpstreamAuth,
};
pub use ses::{ses_name, SesKeys, SesUpstream};
pub use smtp::{SmtpCredentials, SmtpUpstream};
pub use smtp_client::{SmtpClient, UpstreamTls};

use keys::KindKeys;

/// Why an upstream's `url` names no upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamUrlError {
    #[error("`{0}` is not a URL (smtp://, smtps://, mx://, ses://REGION or file://DIR)")]
    NotUrl(String),
    #[error("`{0}`: scheme must be smtp://, smtps://, mx://, ses://REGION or file://DIR")]
    UnknownScheme(String),
    #[error("file:// needs a directory (file://DIR)")]
    NoDirectory,
    #[error("missing host")]
    NoHost,
    #[error("unclosed [ in host")]
    UnclosedBracket,
    #[error("bad port `{0}`")]
    BadPort(String),
    /// What followed `mx://`.
    #[error("`mx://{0}`: mx:// takes no host (the recipients' domains are the hosts)")]
    MxHost(String),
    /// What followed `ses://`.
    #[error("`ses://{0}`: ses:// takes an AWS region (ses://eu-west-1)")]
    NotRegion(String),
}

/// Why a key of an upstream's kind was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamKeyError {
    /// A value its key's type refuses: toml's text, which names the key.
    #[error("in `upstream`: {}", .0.to_string().trim())]
    Value(toml::de::Error),
    /// A key of other kinds: the schemes of the kinds that have it, and this table's URL.
    #[error("key `upstream.{key}`: only for url = {}, not `{url}`", owners.join(" or "))]
    OtherKinds {
        key: String,
        owners: Vec<&'static str>,
        url: String,
    },
    #[error("key `upstream.endpoint_url`: `{0}` is not an http:// or https:// URL")]
    NotHttpUrl(String),
    #[error(
        "key `upstream.configuration_set`: `{0}` is not an SES name (letters, digits, _ and -, \
         at most 64)"
    )]
    NotSesName(String),
    #[error("key `upstream.mx_port`: must be a port, 1 to 65535")]
    PortZero,
    #[error(
        "key `upstream.nameservers`: give at least one `ip:port`, or leave it out for the \
         system's"
    )]
    NoNameservers,
    /// The XOAUTH2 keys (`auth`, `[upstream.oauth]`, `mailboxes`) do not go together.
    #[error("in `upstream`: {0}")]
    Oauth(OauthKeyError),
}

/// One upstream: its name, its kind (with the kind's own keys) and the keys every kind shares.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// What routes and layers call it; a single `[upstream]` table may leave it out
    /// ("default"), each of several `[[upstream]]` tables needs one.
    pub name: Option<Spanned<String>>,
    /// From `url`: `smtp://host:port`, `smtps://host:port`, `mx://`, `ses://REGION` or
    /// `file://DIR`.
    pub kind: UpstreamKind,
    /// Connections (or requests) in flight at once.
    pub pool_size: NonZeroUsize,
    /// Timeout for connecting and for each step upstream.
    pub timeout_ms: NonZeroU64,
    /// Replies that mean "too fast": the message is sent again later, adaptive layers slow.
    pub throttle_replies: ReplyPatterns,
    /// Replies that mean "no more today": the upstream is paused for `quota_pause_ms`.
    pub quota_replies: ReplyPatterns,
    pub quota_pause_ms: NonZeroU64,
    /// Temporary failures in a row (upstream's `4xx`, a lost answer, refused credentials)
    /// after which its breaker opens; a connection that fails opens it at once.
    pub breaker_failures: NonZeroU32,
    /// While its breaker is open, at most one held message is tried (the probe) this often.
    pub breaker_probe_ms: NonZeroU64,
}

/// The keys every kind shares.
const SHARED: &[&str] = &[
    "name",
    "url",
    "pool_size",
    "timeout_ms",
    "throttle_replies",
    "quota_replies",
    "quota_pause_ms",
    "breaker_failures",
    "breaker_probe_ms",
];

impl UpstreamConfig {
    /// The name routes and layers use.
    pub fn name(&self) -> &str {
        self.name.as_ref().map_or(DEFAULT_NAME, |n| n.get_ref())
    }

    /// The URL, normalised.
    pub fn url(&self) -> String {
        self.kind.to_string()
    }

    /// An SMTP client's EHLO name defaults to the relay's own `hostname`.
    pub(super) fn default_helo_name(&mut self, hostname: &str) {
        if let Some(client) = self.kind.smtp_client_mut() {
            client.helo_name.get_or_insert_with(|| hostname.to_string());
        }
    }
}

impl<'de> Deserialize<'de> for UpstreamConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(Table)
    }
}

/// Reads one table: the shared keys as they come, the kind's own kept until the URL is known.
struct Table;

impl<'de> Visitor<'de> for Table {
    type Value = UpstreamConfig;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an [upstream] table")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<UpstreamConfig, M::Error> {
        let mut name = None;
        let mut kind: Option<UpstreamKind> = None;
        let (mut pool_size, mut timeout_ms, mut quota_pause_ms) = (None, None, None);
        let (mut throttle_replies, mut quota_replies) = (None, None);
        let (mut breaker_failures, mut breaker_probe_ms) = (None, None);
        let mut own = KindKeys::default();
        while let Some(key) = map.next_key_seed(Key)? {
            match key.as_str() {
                "name" => name = Some(map.next_value()?),
                "url" => kind = Some(map.next_value::<Url>()?.0),
                "pool_size" => pool_size = Some(map.next_value()?),
                "timeout_ms" => timeout_ms = Some(map.next_value()?),
                "throttle_replies" => throttle_replies = Some(map.next_value()?),
                "quota_replies" => quota_replies = Some(map.next_value()?),
                "quota_pause_ms" => quota_pause_ms = Some(map.next_value()?),
                "breaker_failures" => breaker_failures = Some(map.next_value()?),
                "breaker_probe_ms" => breaker_probe_ms = Some(map.next_value()?),
                _ => {
                    let value = map.next_value_seed(OwnKey {
                        key: &key,
                        kind: kind.as_ref(),
                    })?;
                    own.push(key, value);
                }
            }
        }
        let mut kind = kind.ok_or_else(|| de::Error::missing_field("url"))?;
        let read = kind.read_keys(own).and_then(|()| kind.check_together());
        read.map_err(|e| match &name {
            Some(name) => de::Error::custom(format!("{e} (upstream {:?})", Spanned::get_ref(name))),
            None => de::Error::custom(e),
        })?;
        Ok(UpstreamConfig {
            name,
            kind,
            pool_size: pool_size.unwrap_or(NonZeroUsize::new(16).unwrap()),
            timeout_ms: timeout_ms.unwrap_or(NonZeroU64::new(60_000).unwrap()),
            throttle_replies: throttle_replies.unwrap_or_else(ReplyPatterns::default_throttle),
            quota_replies: quota_replies.unwrap_or_else(ReplyPatterns::default_quota),
            quota_pause_ms: quota_pause_ms.unwrap_or(NonZeroU64::new(900_000).unwrap()),
            breaker_failures: breaker_failures.unwrap_or(NonZeroU32::new(5).unwrap()),
            breaker_probe_ms: breaker_probe_ms.unwrap_or(NonZeroU64::new(5_000).unwrap()),
        })
    }
}

/// A key of the table, refused at its own line when no kind has it.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        let key = String::deserialize(deserializer)?;
        if SHARED.contains(&key.as_str()) || UpstreamKind::owns(&key) {
            return Ok(key);
        }
        Err(de::Error::custom(format!(
            "unknown field `{key}` in `upstream`, expected one of {SHARED:?} or a key of its \
             kind: {} (see docs/configuration.md)",
            UpstreamKind::keys_by_kind()
        )))
    }
}

/// A key of the kind, held as a value. Once the URL has named the kind (it usually comes
/// first), the key is checked at once, so that a refusal names its own line.
struct OwnKey<'k> {
    key: &'k str,
    kind: Option<&'k UpstreamKind>,
}

impl<'de> DeserializeSeed<'de> for OwnKey<'_> {
    type Value = toml::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<toml::Value, D::Error> {
        let value = toml::Value::deserialize(deserializer)?;
        if let Some(kind) = self.kind {
            let mut alone = KindKeys::default();
            alone.push(self.key.to_string(), value.clone());
            kind.clone().read_keys(alone).map_err(de::Error::custom)?;
        }
        Ok(value)
    }
}

/// `url`, refused at its own line when it names no kind.
struct Url(UpstreamKind);

impl<'de> Deserialize<'de> for Url {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Url, D::Error> {
        let url = String::deserialize(deserializer)?;
        UpstreamKind::from_url(&url)
            .map(Url)
            .map_err(|e| de::Error::custom(format!("key `upstream.url`: {e}")))
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

#[cfg(test)]
mod tests;
