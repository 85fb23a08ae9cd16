//! `[spool]`: where a `mode = "hold"` layer keeps the messages it has answered `250` for and
//! not yet forwarded. Without the section the relay stores no message (pass-through), and a
//! hold-mode layer is a config error.

use std::num::NonZeroU64;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::BrokenRule;

/// Where held messages are kept (`spool_store`): a directory of this process, or S3 and SQS shared by
/// every replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpoolStore {
    #[default]
    Dir,
    S3,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpoolConfig {
    /// `dir` (the default) or `s3`.
    #[serde(default = "default_store")]
    pub store: Spanned<SpoolStore>,
    /// The spool's directory (created when absent); one relay process per directory. Only
    /// with `store = "dir"`, where it is required.
    pub dir: Option<Spanned<PathBuf>>,
    /// `store = "s3"`: the bucket of the held messages' objects.
    pub bucket: Option<Spanned<String>>,
    /// `store = "s3"`: the objects' names start with it.
    pub prefix: Option<Spanned<String>>,
    /// `store = "s3"`: the SQS standard queue of the held messages' entries.
    pub queue_url: Option<Spanned<String>>,
    /// `store = "s3"`: the AWS region of the bucket and the queue.
    pub region: Option<Spanned<String>>,
    /// `store = "s3"`: one endpoint for S3 and SQS (an S3- and SQS-compatible server).
    pub endpoint_url: Option<Spanned<String>>,
    /// `store = "s3"`: every S3 and SQS call is bounded by it.
    pub timeout_ms: Option<Spanned<NonZeroU64>>,
    /// `store = "s3"`: how long a received entry stays invisible to the other replicas.
    pub visibility_ms: Option<Spanned<u64>>,
    /// `store = "s3"`: the most entries this replica holds received at once.
    pub receive_max: Option<Spanned<NonZeroU64>>,
    /// `store = "s3"`: the held messages past which a message is refused `452 4.3.1`.
    pub max_messages: Option<Spanned<NonZeroU64>>,
    /// The bytes of held messages past which a message is refused `452 4.3.1`.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// The share of `max_bytes` one key may hold, in (0, 1]: past it the key's next message
    /// gets its layer's `451`, so that one tenant's burst cannot fill the spool for the
    /// others, even one that came first into an empty spool.
    #[serde(default = "default_max_key_share")]
    pub max_key_share: Spanned<f64>,
    /// The free bytes the spool's filesystem keeps: a message that would leave less is
    /// refused `452 4.3.1`.
    #[serde(default = "default_min_free_bytes")]
    pub min_free_bytes: u64,
    /// A message held longer is given up (the sender gets a report). Postfix's
    /// `maximal_queue_lifetime`.
    #[serde(default = "default_max_hold_ms")]
    pub max_hold_ms: Spanned<NonZeroU64>,
    /// The first wait after a temporary refusal at release; each next one doubles.
    #[serde(default = "default_retry_min_ms")]
    pub retry_min_ms: Spanned<NonZeroU64>,
    /// The longest wait between two attempts.
    #[serde(default = "default_retry_max_ms")]
    pub retry_max_ms: NonZeroU64,
    /// The `From:` of the delivery status notifications sent to a failed message's sender;
    /// without it none is sent and the failed message is kept for the operator.
    pub report_from: Option<Spanned<String>>,
}

impl SpoolConfig {
    /// The directory of `store = "dir"`; `None` with `store = "s3"`.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.dir.as_ref().map(|d| d.get_ref().as_path())
    }

    /// The bytes one key may hold while other keys hold messages (`max_key_share` of
    /// `max_bytes`).
    pub fn key_share_bytes(&self) -> u64 {
        (self.max_bytes as f64 * *self.max_key_share.get_ref()) as u64
    }
}

/// A `[spool]` rule no single key's type can say, broken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpoolRule {
    #[error("must be at most `spool.retry_max_ms`")]
    RetryMinOverMax,
    #[error("{0} is not a share in (0, 1]")]
    NotAShare(f64),
    #[error("`{0}` is not a plain address (local@domain, ASCII, no spaces or angle brackets)")]
    NotAnAddress(String),
    #[error("a `mode = \"hold\"` layer keeps messages in the spool: add a `[spool]` section")]
    HoldWithoutSpool,
    #[error("`action = \"hold\"` keeps a paused tenant's messages in the spool: add a `[spool]` section")]
    ReputationHoldWithoutSpool,
    #[error("`spool.{0}` is for `store = \"{1}\"`")]
    OtherStore(&'static str, &'static str),
    #[error("`store = \"{1}\"` needs `spool.{0}`")]
    Missing(&'static str, &'static str),
    #[error("`{0}` is not an http:// or https:// URL")]
    NotAnEndpoint(String),
    #[error("{0} is below 1000 ms")]
    VisibilityTooShort(u64),
    #[error(
        "{0} ms is past SQS's longest retention (14 days = 1209600000 ms) with `store = \"s3\"`"
    )]
    PastRetention(u64),
}

/// The common keys' rules; the store's own are `spool_store::validate_store`'s.
pub(super) fn validate(spool: &SpoolConfig, text: &str) -> Result<(), BrokenRule> {
    if spool.retry_min_ms.get_ref().get() > spool.retry_max_ms.get() {
        return Err(BrokenRule::at(
            text,
            spool.retry_min_ms.span(),
            "spool.retry_min_ms",
            SpoolRule::RetryMinOverMax,
        ));
    }
    let share = *spool.max_key_share.get_ref();
    if !(share > 0.0 && share <= 1.0) {
        return Err(BrokenRule::at(
            text,
            spool.max_key_share.span(),
            "spool.max_key_share",
            SpoolRule::NotAShare(share),
        ));
    }
    if let Some(from) = &spool.report_from {
        if !plain_address(from.get_ref()) {
            let problem = SpoolRule::NotAnAddress(from.get_ref().clone());
            return Err(BrokenRule::at(
                text,
                from.span(),
                "spool.report_from",
                problem,
            ));
        }
    }
    Ok(())
}

/// `local@domain` in printable ASCII, with nothing that could break the header field or the
/// envelope it is written in.
fn plain_address(address: &str) -> bool {
    let ok = |c: char| c.is_ascii_graphic() && !"<>()[],;:\\\"".contains(c);
    match address.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && !domain.is_empty()
                && !domain.contains('@')
                && address.len() <= 254
                && address.chars().all(ok)
        }
        None => false,
    }
}

fn default_store() -> Spanned<SpoolStore> {
    Spanned::new(0..0, SpoolStore::Dir)
}
fn default_max_bytes() -> u64 {
    10 << 30
}
fn default_max_key_share() -> Spanned<f64> {
    Spanned::new(0..0, 0.5)
}
fn default_min_free_bytes() -> u64 {
    1 << 30
}
fn default_max_hold_ms() -> Spanned<NonZeroU64> {
    Spanned::new(0..0, NonZeroU64::new(5 * 86_400_000).unwrap())
}
fn default_retry_min_ms() -> Spanned<NonZeroU64> {
    Spanned::new(0..0, NonZeroU64::new(60_000).unwrap())
}
fn default_retry_max_ms() -> NonZeroU64 {
    NonZeroU64::new(3_600_000).unwrap()
}

#[cfg(test)]
mod tests {
    use super::plain_address;
    use crate::config::{Config, Mode};

    #[test]
    fn a_report_address_is_plain() {
        assert!(plain_address("postmaster@relay.example"));
        for bad in [
            "",
            "x",
            "@d",
            "l@",
            "a b@d",
            "<a@d>",
            "a@d@e",
            "a@d\r\nBcc: x",
        ] {
            assert!(!plain_address(bad), "{bad:?}");
        }
    }

    use crate::config::tests::MINIMAL;

    #[test]
    fn a_hold_layer_without_a_spool_is_refused_at_its_line() {
        let layer = "[[throttle]]\nname = \"t\"\nkey = \"none\"\nlimit = 5\nmode = \"hold\"\n";
        let err = Config::parse(&format!("{MINIMAL}{layer}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("throttle.mode") && err.contains("[spool]") && err.contains("line 9"),
            "{err}"
        );
        let reputation = "[reputation]\nkey = \"auth\"\naction = \"hold\"\n";
        let err = Config::parse(&format!("{MINIMAL}{reputation}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("reputation.action") && err.contains("[spool]") && err.contains("line 7"),
            "{err}"
        );
        let c = Config::parse(&format!("{MINIMAL}{layer}[spool]\ndir = \"spool\"\n")).unwrap();
        assert_eq!(*c.throttle[0].mode.get_ref(), Mode::Hold);
        assert_eq!(c.throttle[0].max_held.get(), 100_000);
    }

    #[test]
    fn the_spool_gets_its_defaults_and_its_rules() {
        let c = Config::parse(&format!("{MINIMAL}[spool]\ndir = \"/var/spool/ms\"\n")).unwrap();
        let spool = c.spool.unwrap();
        assert_eq!(
            (
                spool.max_bytes,
                spool.min_free_bytes,
                spool.max_hold_ms.get_ref().get()
            ),
            (10 << 30, 1 << 30, 432_000_000)
        );
        assert!(spool.retry_min_ms.get_ref().get() <= spool.retry_max_ms.get());
        assert!(spool.report_from.is_none());
        assert_eq!(spool.key_share_bytes(), 5 << 30, "half of max_bytes");
        for (body, key, line) in [
            (
                "retry_min_ms = 5000\nretry_max_ms = 1000",
                "spool.retry_min_ms",
                7,
            ),
            ("report_from = \"not an address\"", "spool.report_from", 7),
            ("max_hold_ms = 0", "max_hold_ms", 7),
            ("max_key_share = 0.0", "spool.max_key_share", 7),
            ("max_key_share = 1.5", "spool.max_key_share", 7),
        ] {
            let text = format!("{MINIMAL}[spool]\ndir = \"s\"\n{body}\n");
            let err = Config::parse(&text).unwrap_err().to_string();
            assert!(err.contains(key), "{body}: {err}");
            assert!(err.contains(&format!("line {line}")), "{body}: {err}");
        }
    }
}
