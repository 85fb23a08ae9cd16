//! `[spool]`: where a `mode = "hold"` layer keeps the messages it has answered `250` for and
//! not yet forwarded. Without the section the relay stores no message (pass-through), and a
//! hold-mode layer is a config error.

use std::num::NonZeroU64;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::BrokenRule;

/// Where held messages are kept: a directory of this process, or S3 and SQS shared by
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

/// `[spool]` with `store = "s3"`, its defaults filled in (checked by `validate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    pub bucket: String,
    pub prefix: String,
    pub queue_url: String,
    pub region: String,
    pub endpoint_url: Option<String>,
    pub timeout: std::time::Duration,
    pub visibility: std::time::Duration,
    pub receive_max: usize,
    pub max_messages: u64,
}

/// SQS keeps a message at most 14 days: a message held longer would vanish unreported.
pub const SQS_MAX_RETENTION_MS: u64 = 14 * 86_400_000;

impl SpoolConfig {
    /// The directory of `store = "dir"`; `None` with `store = "s3"`.
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.dir.as_ref().map(|d| d.get_ref().as_path())
    }

    /// The settings of `store = "s3"`; `None` with `store = "dir"`.
    pub fn s3(&self) -> Option<S3Settings> {
        if *self.store.get_ref() != SpoolStore::S3 {
            return None;
        }
        let text = |v: &Option<Spanned<String>>| v.as_ref().map(|v| v.get_ref().clone());
        let ms =
            |v: Option<u64>, default: u64| std::time::Duration::from_millis(v.unwrap_or(default));
        Some(S3Settings {
            bucket: text(&self.bucket)?,
            prefix: text(&self.prefix).unwrap_or_else(|| "mailsluice/".into()),
            queue_url: text(&self.queue_url)?,
            region: text(&self.region)?,
            endpoint_url: text(&self.endpoint_url),
            timeout: ms(self.timeout_ms.as_ref().map(|t| t.get_ref().get()), 5000),
            visibility: ms(self.visibility_ms.as_ref().map(|t| *t.get_ref()), 60_000),
            receive_max: (self.receive_max.as_ref()).map_or(256, |t| t.get_ref().get() as usize),
            max_messages: (self.max_messages.as_ref()).map_or(1_000_000, |t| t.get_ref().get()),
        })
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

pub(super) fn validate(spool: &SpoolConfig, text: &str) -> Result<(), BrokenRule> {
    validate_store(spool, text)?;
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

/// The keys of the other store refused, the required ones of this store present, the s3
/// store's values in their range; each at its line (a missing key at `store`'s).
fn validate_store(spool: &SpoolConfig, text: &str) -> Result<(), BrokenRule> {
    let span = |v: &Option<Spanned<String>>| v.as_ref().map(|v| v.span());
    let s3_keys: [(&'static str, Option<std::ops::Range<usize>>); 9] = [
        ("spool.bucket", span(&spool.bucket)),
        ("spool.prefix", span(&spool.prefix)),
        ("spool.queue_url", span(&spool.queue_url)),
        ("spool.region", span(&spool.region)),
        ("spool.endpoint_url", span(&spool.endpoint_url)),
        (
            "spool.timeout_ms",
            spool.timeout_ms.as_ref().map(|v| v.span()),
        ),
        (
            "spool.visibility_ms",
            spool.visibility_ms.as_ref().map(|v| v.span()),
        ),
        (
            "spool.receive_max",
            spool.receive_max.as_ref().map(|v| v.span()),
        ),
        (
            "spool.max_messages",
            spool.max_messages.as_ref().map(|v| v.span()),
        ),
    ];
    let at = |span, key, rule: SpoolRule| BrokenRule::at(text, span, key, rule);
    match spool.store.get_ref() {
        SpoolStore::Dir => {
            if let Some((key, Some(span))) = s3_keys.into_iter().find(|(_, s)| s.is_some()) {
                let name = key.trim_start_matches("spool.");
                return Err(at(span, key, SpoolRule::OtherStore(name, "s3")));
            }
            if spool.dir.is_none() {
                let rule = SpoolRule::Missing("dir", "dir");
                return Err(match spool.store.span() {
                    span if span.is_empty() => BrokenRule::unlocated("spool.dir", rule),
                    span => at(span, "spool.dir", rule),
                });
            }
        }
        SpoolStore::S3 => {
            if let Some(dir) = &spool.dir {
                let rule = SpoolRule::OtherStore("dir", "dir");
                return Err(at(dir.span(), "spool.dir", rule));
            }
            for (key, value) in s3_keys.iter().take(4) {
                if *key != "spool.prefix" && value.is_none() {
                    let name = key.trim_start_matches("spool.");
                    let rule = SpoolRule::Missing(name, "s3");
                    return Err(at(spool.store.span(), key, rule));
                }
            }
            validate_s3_values(spool, text)?;
        }
    }
    Ok(())
}

/// The s3 store's values: an endpoint that is a URL, a visibility of at least a second, and
/// no hold longer than SQS keeps a message.
fn validate_s3_values(spool: &SpoolConfig, text: &str) -> Result<(), BrokenRule> {
    if let Some(url) = &spool.endpoint_url {
        let u = url.get_ref();
        let scheme = u
            .strip_prefix("http://")
            .or_else(|| u.strip_prefix("https://"));
        if scheme.is_none_or(|rest| rest.is_empty()) {
            let rule = SpoolRule::NotAnEndpoint(u.clone());
            return Err(BrokenRule::at(text, url.span(), "spool.endpoint_url", rule));
        }
    }
    if let Some(v) = spool.visibility_ms.as_ref().filter(|v| *v.get_ref() < 1000) {
        let rule = SpoolRule::VisibilityTooShort(*v.get_ref());
        return Err(BrokenRule::at(text, v.span(), "spool.visibility_ms", rule));
    }
    if spool.max_hold_ms.get_ref().get() > SQS_MAX_RETENTION_MS {
        let rule = SpoolRule::PastRetention(spool.max_hold_ms.get_ref().get());
        let span = spool.max_hold_ms.span();
        return Err(BrokenRule::at(text, span, "spool.max_hold_ms", rule));
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

    const S3: &str = "store = \"s3\"\nbucket = \"b\"\nqueue_url = \"http://127.0.0.1:5/q\"\nregion = \"eu-west-1\"\n";

    #[test]
    fn the_s3_store_gets_its_defaults() {
        let c = Config::parse(&format!("{MINIMAL}[spool]\n{S3}")).unwrap();
        let spool = c.spool.unwrap();
        assert_eq!(spool.dir(), None);
        let s3 = spool.s3().unwrap();
        assert_eq!(
            (s3.bucket.as_str(), s3.prefix.as_str(), s3.region.as_str()),
            ("b", "mailsluice/", "eu-west-1")
        );
        assert_eq!(s3.endpoint_url, None);
        assert_eq!(
            (s3.timeout.as_millis(), s3.visibility.as_millis()),
            (5000, 60_000)
        );
        assert_eq!((s3.receive_max, s3.max_messages), (256, 1_000_000));
        let dir = Config::parse(&format!("{MINIMAL}[spool]\ndir = \"s\"\n")).unwrap();
        assert!(dir.spool.unwrap().s3().is_none());
    }

    /// Each rule of the stores, at its key and its line (a missing key at `store`'s).
    #[test]
    fn each_store_refuses_the_others_keys_and_needs_its_own() {
        let s3_line = |body: &str| format!("{S3}{body}\n");
        let cases = [
            // (the [spool] table, the key named, the line)
            (s3_line("dir = \"s\""), "spool.dir", 10),
            (
                "store = \"s3\"\nqueue_url = \"q\"\nregion = \"r\"\n".to_string(),
                "spool.bucket",
                6,
            ),
            (
                "store = \"s3\"\nbucket = \"b\"\nregion = \"r\"\n".to_string(),
                "spool.queue_url",
                6,
            ),
            (
                "store = \"s3\"\nbucket = \"b\"\nqueue_url = \"q\"\n".to_string(),
                "spool.region",
                6,
            ),
            (
                s3_line("endpoint_url = \"ftp://x\""),
                "spool.endpoint_url",
                10,
            ),
            (
                s3_line("endpoint_url = \"http://\""),
                "spool.endpoint_url",
                10,
            ),
            (s3_line("visibility_ms = 999"), "spool.visibility_ms", 10),
            (s3_line("max_hold_ms = 1209600001"), "spool.max_hold_ms", 10),
            ("store = \"dir\"\n".to_string(), "spool.dir", 6),
            (
                "dir = \"s\"\nbucket = \"b\"\n".to_string(),
                "spool.bucket",
                7,
            ),
            (
                "dir = \"s\"\nprefix = \"p/\"\n".to_string(),
                "spool.prefix",
                7,
            ),
            (
                "dir = \"s\"\nqueue_url = \"q\"\n".to_string(),
                "spool.queue_url",
                7,
            ),
            (
                "dir = \"s\"\nregion = \"r\"\n".to_string(),
                "spool.region",
                7,
            ),
            (
                "dir = \"s\"\nendpoint_url = \"http://e\"\n".to_string(),
                "spool.endpoint_url",
                7,
            ),
            (
                "dir = \"s\"\ntimeout_ms = 10\n".to_string(),
                "spool.timeout_ms",
                7,
            ),
            (
                "dir = \"s\"\nvisibility_ms = 10000\n".to_string(),
                "spool.visibility_ms",
                7,
            ),
            (
                "dir = \"s\"\nreceive_max = 10\n".to_string(),
                "spool.receive_max",
                7,
            ),
            (
                "dir = \"s\"\nmax_messages = 10\n".to_string(),
                "spool.max_messages",
                7,
            ),
        ];
        for (table, key, line) in cases {
            let err = Config::parse(&format!("{MINIMAL}[spool]\n{table}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{table}: {err}");
            assert!(err.contains(&format!("line {line}")), "{table}: {err}");
        }
        let no_dir = Config::parse(&format!("{MINIMAL}[spool]\nmax_bytes = 5\n"))
            .unwrap_err()
            .to_string();
        assert!(no_dir.contains("spool.dir"), "{no_dir}");
        // Fourteen days exactly is SQS's retention: accepted; any hold with a directory.
        let fourteen = s3_line("max_hold_ms = 1209600000\nvisibility_ms = 1000");
        Config::parse(&format!("{MINIMAL}[spool]\n{fourteen}")).unwrap();
        let long = "dir = \"s\"\nmax_hold_ms = 2000000000\n";
        Config::parse(&format!("{MINIMAL}[spool]\n{long}")).unwrap();
    }
}
