//! `[spool]`'s store: `store = "dir"` (the default, `dir`) or `"s3"` (a bucket and a queue
//! shared by every replica), each refusing the other's keys; the s3 store's settings with
//! their defaults.

use std::time::Duration;

use toml::Spanned;

use super::spool::{SpoolConfig, SpoolRule, SpoolStore};
use super::BrokenRule;

/// `[spool]` with `store = "s3"`, its defaults filled in (checked by `validate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    pub bucket: String,
    pub prefix: String,
    pub queue_url: String,
    pub region: String,
    pub endpoint_url: Option<String>,
    pub timeout: Duration,
    pub visibility: Duration,
    pub receive_max: usize,
    pub max_messages: u64,
}

/// SQS keeps a message at most 14 days: a message held longer would vanish unreported.
pub const SQS_MAX_RETENTION_MS: u64 = 14 * 86_400_000;

impl SpoolConfig {
    /// The settings of `store = "s3"`; `None` with `store = "dir"`.
    pub fn s3(&self) -> Option<S3Settings> {
        if *self.store.get_ref() != SpoolStore::S3 {
            return None;
        }
        let text = |v: &Option<Spanned<String>>| v.as_ref().map(|v| v.get_ref().clone());
        let ms = |v: Option<u64>, default: u64| Duration::from_millis(v.unwrap_or(default));
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
}

/// The keys of the other store refused, the required ones of this store present, the s3
/// store's values in their range; each at its line (a missing key at `store`'s).
pub(super) fn validate_store(spool: &SpoolConfig, text: &str) -> Result<(), BrokenRule> {
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

#[cfg(test)]
mod tests {
    use crate::config::tests::MINIMAL;
    use crate::config::Config;

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
