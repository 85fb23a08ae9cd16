//! Where a layer's key comes from (`key = "..."` in a `[[throttle]]` layer), parsed once when
//! the file is read.

use serde::Deserialize;

/// Longest key: keys are map entries, log fields and parts of the header fields a route adds,
/// so neither a hostile header nor a long tenant may make them large. A key read from a
/// header is cut to it; a tenant longer than it is refused when the file is read.
pub const MAX_KEY_BYTES: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum KeySource {
    /// The authenticated user's tenant (or user name).
    Auth,
    /// The value of a header, e.g. `header:X-Tenant`. Name compared case-insensitively.
    Header(String),
    /// The envelope sender, lower-cased.
    Sender,
    /// The domain of the envelope sender, lower-cased.
    SenderDomain,
    /// The domain of the first recipient, lower-cased.
    RcptDomain,
    /// The client's IP address.
    ClientIp,
    /// One bucket for every message.
    None,
}

/// Text that names no key source, as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}`: expected auth, header:<Name>, sender, sender-domain, rcpt-domain, client-ip or none"
)]
pub struct UnknownKeySource(pub String);

/// An [`UnknownKeySource`] in the file, with the config key it was read from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key `{key}`: {error}")]
pub struct BadKeySource {
    pub key: &'static str,
    pub error: UnknownKeySource,
}

impl KeySource {
    pub fn parse(text: &str) -> Result<KeySource, UnknownKeySource> {
        Ok(match text {
            "auth" => KeySource::Auth,
            "sender" => KeySource::Sender,
            "sender-domain" => KeySource::SenderDomain,
            "rcpt-domain" => KeySource::RcptDomain,
            "client-ip" => KeySource::ClientIp,
            "none" => KeySource::None,
            _ => match text.strip_prefix("header:") {
                Some(name) if is_header_name(name) => KeySource::Header(name.to_string()),
                _ => return Err(UnknownKeySource(text.to_string())),
            },
        })
    }

    /// [`KeySource::parse`], its error naming the config `key` it was read from.
    pub(super) fn parse_for(key: &'static str, text: &str) -> Result<KeySource, BadKeySource> {
        KeySource::parse(text).map_err(|error| BadKeySource { key, error })
    }
}

impl TryFrom<String> for KeySource {
    type Error = BadKeySource;

    fn try_from(text: String) -> Result<KeySource, BadKeySource> {
        KeySource::parse_for("throttle.key", &text)
    }
}

/// RFC 5322 field name: printable ASCII except colon.
fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':')
}
