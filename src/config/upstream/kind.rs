//! Which kind of upstream a table is, chosen by the scheme of its `url`: each kind with its
//! own keys, in the file named after it. A new kind is one file here, one variant below (with
//! its arms in this file), and its forwarder in `crate::upstream`.

use super::file::FileUpstream;
use super::keys::KindKeys;
use super::mx::MxUpstream;
use super::ses::SesUpstream;
use super::smtp::SmtpUpstream;
use super::smtp_client::SmtpClient;
use super::{UpstreamKeyError, UpstreamUrlError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamKind {
    /// `file://DIR`: one `.eml` per message, the embedded default.
    File(FileUpstream),
    /// `smtp://host:port` (STARTTLS per `tls`) or `smtps://host:port` (TLS from the start).
    Smtp(SmtpUpstream),
    /// `mx://`: straight to each recipient domain's MX hosts.
    Mx(MxUpstream),
    /// `ses://REGION`: Amazon SES over its v2 API.
    Ses(SesUpstream),
}

/// Every kind's scheme and own keys, for the URL's parse and for naming the kind that owns a
/// key given to another.
const KINDS: &[(&str, &[&[&str]])] = &[
    ("file://DIR", &[]),
    ("smtp://", SmtpUpstream::KEYS),
    ("smtps://", SmtpUpstream::KEYS),
    ("mx://", MxUpstream::KEYS),
    ("ses://REGION", SesUpstream::KEYS),
];

impl UpstreamKind {
    /// The kind a URL names, its own keys not read yet.
    pub fn from_url(url: &str) -> Result<UpstreamKind, UpstreamUrlError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| UpstreamUrlError::NotUrl(url.to_string()))?;
        let kind = match scheme {
            "file" => UpstreamKind::File(FileUpstream::from_url(rest)?),
            "smtp" => UpstreamKind::Smtp(SmtpUpstream::from_url(rest, false)?),
            "smtps" => UpstreamKind::Smtp(SmtpUpstream::from_url(rest, true)?),
            "mx" => UpstreamKind::Mx(MxUpstream::from_url(rest)?),
            "ses" => UpstreamKind::Ses(SesUpstream::from_url(rest)?),
            _ => return Err(UpstreamUrlError::UnknownScheme(url.to_string())),
        };
        Ok(kind)
    }

    /// Each kind's own keys, for the error that refuses a key no kind has:
    /// `smtp:// ["tls", ...], mx:// [...]`.
    pub(super) fn keys_by_kind() -> String {
        (KINDS.iter())
            .filter(|(_, keys)| !keys.is_empty())
            .map(|(scheme, keys)| format!("{scheme} {:?}", keys.concat()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether some kind has a key called `key`.
    pub(super) fn owns(key: &str) -> bool {
        owners(key).next().is_some()
    }

    /// Takes this kind's keys; a key of another kind is an error that names both.
    pub(super) fn read_keys(&mut self, mut keys: KindKeys) -> Result<(), UpstreamKeyError> {
        match self {
            UpstreamKind::File(_) => {}
            UpstreamKind::Smtp(smtp) => smtp.read_keys(&mut keys)?,
            UpstreamKind::Mx(mx) => mx.read_keys(&mut keys)?,
            UpstreamKind::Ses(ses) => ses.read_keys(&mut keys)?,
        }
        let Some(key) = keys.left() else {
            return Ok(());
        };
        Err(UpstreamKeyError::OtherKinds {
            key: key.to_string(),
            owners: owners(key).collect(),
            url: self.to_string(),
        })
    }

    /// The kind's keys that must go together, checked once the table is read whole (each
    /// key alone was checked as it was read).
    pub(super) fn check_together(&self) -> Result<(), UpstreamKeyError> {
        match self {
            UpstreamKind::Smtp(smtp) => smtp.check_together(),
            UpstreamKind::File(_) | UpstreamKind::Mx(_) | UpstreamKind::Ses(_) => Ok(()),
        }
    }

    /// The largest message the kind can carry, when it has a bound of its own.
    pub fn max_message_bytes(&self) -> Option<usize> {
        match self {
            UpstreamKind::Ses(_) => Some(SesUpstream::MAX_MESSAGE_BYTES),
            UpstreamKind::File(_) | UpstreamKind::Smtp(_) | UpstreamKind::Mx(_) => None,
        }
    }

    /// The SMTP client settings of the kinds that speak SMTP to the next hop.
    pub(super) fn smtp_client_mut(&mut self) -> Option<&mut SmtpClient> {
        match self {
            UpstreamKind::File(_) | UpstreamKind::Ses(_) => None,
            UpstreamKind::Smtp(smtp) => Some(&mut smtp.client),
            UpstreamKind::Mx(mx) => Some(&mut mx.client),
        }
    }
}

/// The schemes of the kinds that have a key called `key`.
fn owners(key: &str) -> impl Iterator<Item = &'static str> + '_ {
    KINDS
        .iter()
        .filter(move |(_, keys)| keys.iter().any(|k| k.contains(&key)))
        .map(|(scheme, _)| *scheme)
}

/// The URL, normalised (default ports written out).
impl std::fmt::Display for UpstreamKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamKind::File(file) => file.fmt(f),
            UpstreamKind::Smtp(smtp) => smtp.fmt(f),
            UpstreamKind::Mx(_) => f.write_str("mx://"),
            UpstreamKind::Ses(ses) => ses.fmt(f),
        }
    }
}
