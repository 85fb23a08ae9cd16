//! `[reputation]`: the tenant reputation guard. SES's bounce and complaint events, read from
//! an SQS queue (`[reputation.sqs]`) or posted by SNS (`[reputation.sns]`), are counted per
//! tenant against the messages the tenant sent; past a rate the tenant is paused. A message
//! counts for its tenant (`[tenant]`) unless `key` names another key source, read with a
//! layer's trust rules, so a client cannot move its bounces onto another tenant with a header.

use std::num::{NonZeroU64, NonZeroUsize};

use serde::Deserialize;
use toml::Spanned;

use super::{BadKeySource, BrokenRule, KeySource};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReputationConfig {
    /// Whose reputation a message counts for; absent, its tenant's (`[tenant]`).
    pub key: Option<ReputationKey>,
    /// The key when `key`'s source is absent (as a layer's `default_key`); only with `key`
    /// (without it, `[tenant] default_key` names the tenant).
    #[serde(default = "default_key")]
    pub default_key: String,
    /// Hard bounces / messages sent, per tenant, over the window; above it the tenant stops.
    #[serde(default = "default_bounce_rate")]
    pub max_bounce_rate: Spanned<f64>,
    /// Complaints / messages sent.
    #[serde(default = "default_complaint_rate")]
    pub max_complaint_rate: Spanned<f64>,
    /// No verdict on a tenant with fewer messages than this in the window: a few bounces of
    /// a small sender say little.
    #[serde(default = "default_min_messages")]
    pub min_messages: NonZeroU64,
    /// No bounce verdict under this many hard bounces in the window, whatever the rate: one
    /// mistyped address must not stop a tenant.
    #[serde(default = "default_min_bounces")]
    pub min_bounces: NonZeroU64,
    /// No complaint verdict under this many complaints in the window, whatever the rate:
    /// anyone who receives one of a tenant's messages can press "spam" once.
    #[serde(default = "default_min_complaints")]
    pub min_complaints: NonZeroU64,
    #[serde(default = "default_window_ms")]
    pub window_ms: NonZeroU64,
    /// Spanned: an `action = "hold"` without `[spool]` is reported at this key's line.
    #[serde(default = "default_action")]
    pub action: Spanned<Action>,
    /// Hard-bounced and complained addresses are refused at RCPT, for every tenant.
    #[serde(default = "yes")]
    pub suppress: bool,
    /// How long an address stays suppressed.
    #[serde(default = "default_suppress_ttl_ms")]
    pub suppress_ttl_ms: NonZeroU64,
    /// Messages whose SES id is kept to attribute their events (about 200 bytes each); past
    /// it the oldest is forgotten and its events count as unattributed.
    #[serde(default = "default_max_tracked_messages")]
    pub max_tracked_messages: NonZeroUsize,
    /// Tenants counted at once; past it the one idle longest is forgotten.
    #[serde(default = "default_max_tenants")]
    pub max_tenants: NonZeroUsize,
    /// Suppressed addresses held; past it the oldest suppression goes.
    #[serde(default = "default_max_suppressed")]
    pub max_suppressed: NonZeroUsize,
    pub sqs: Option<SqsConfig>,
    pub sns: Option<SnsConfig>,
    /// Keeps the guard and SES's own view of each SES tenant in step: a tenant the guard
    /// pauses is disabled at SES (and enabled on resume), SES's status is read back (a tenant
    /// SES disabled is paused in the relay), and suppressions go on the tenant's list at SES.
    #[serde(default)]
    pub ses_sync: bool,
    /// How often each such SES tenant's standing is read (`GetReputationEntity`), and failed
    /// writes tried again.
    #[serde(default = "default_ses_refresh_ms")]
    pub ses_refresh_ms: NonZeroU64,
}

impl ReputationConfig {
    pub fn window(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.window_ms.get())
    }
}

/// `key` of `[reputation]`: a key source like a layer's, named in its own errors.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct ReputationKey(pub KeySource);

impl TryFrom<String> for ReputationKey {
    type Error = BadKeySource;

    fn try_from(text: String) -> Result<ReputationKey, BadKeySource> {
        KeySource::parse_for("reputation.key", &text).map(ReputationKey)
    }
}

/// What a tenant past a limit gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// `451 4.7.1`: the client keeps the message and retries later.
    #[default]
    Pause,
    /// `550 5.7.1`: the client gives the message up.
    Reject,
    /// Logged and counted only.
    Warn,
    /// Like `pause`, but a message a hold-mode layer charges is held in the spool (`250`)
    /// instead of refused, and the tenant's held messages are released only once it is
    /// resumed. Needs `[spool]`.
    Hold,
}

/// `[reputation.sqs]`: SES events from an SQS queue.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqsConfig {
    pub queue_url: Spanned<String>,
    pub region: String,
    /// Another endpoint than AWS's (a VPC endpoint, a test server).
    pub endpoint_url: Option<String>,
}

/// `[reputation.sns]`: SNS topics that may post events to `POST /ses/events`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnsConfig {
    pub topics: Vec<Spanned<String>>,
}

fn default_key() -> String {
    "default".into()
}
fn default_bounce_rate() -> Spanned<f64> {
    Spanned::new(0..0, 0.05)
}
fn default_complaint_rate() -> Spanned<f64> {
    Spanned::new(0..0, 0.001)
}
fn default_min_messages() -> NonZeroU64 {
    NonZeroU64::new(100).unwrap()
}
fn default_min_bounces() -> NonZeroU64 {
    NonZeroU64::new(5).unwrap()
}
fn default_min_complaints() -> NonZeroU64 {
    NonZeroU64::new(3).unwrap()
}
fn default_action() -> Spanned<Action> {
    Spanned::new(0..0, Action::default())
}

fn default_window_ms() -> NonZeroU64 {
    NonZeroU64::new(86_400_000).unwrap()
}
fn default_suppress_ttl_ms() -> NonZeroU64 {
    NonZeroU64::new(1_209_600_000).unwrap()
}
fn default_max_tracked_messages() -> NonZeroUsize {
    NonZeroUsize::new(1_000_000).unwrap()
}
fn default_max_tenants() -> NonZeroUsize {
    NonZeroUsize::new(100_000).unwrap()
}
fn default_max_suppressed() -> NonZeroUsize {
    NonZeroUsize::new(1_000_000).unwrap()
}
fn default_ses_refresh_ms() -> NonZeroU64 {
    NonZeroU64::new(300_000).unwrap()
}
fn yes() -> bool {
    true
}

/// The rules of `[reputation]` that no single key's type can say.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReputationRule {
    #[error("{0} is not a rate in (0, 1]")]
    NotARate(f64),
    #[error("at most {} bytes", super::MAX_KEY_BYTES)]
    DefaultKeyTooLong,
    #[error("only with `key`: without it the tenant's (`[tenant] default_key`) applies")]
    DefaultKeyWithoutKey,
    #[error("expected an https:// queue URL")]
    NotQueueUrl,
    #[error("expected a topic ARN, arn:aws:sns:REGION:ACCOUNT:NAME")]
    NotTopicArn,
}

/// The rules no single key's type can say; errors name the key and its line.
pub(super) fn validate(config: &ReputationConfig, text: &str) -> Result<(), BrokenRule> {
    for (key, rate) in [
        ("reputation.max_bounce_rate", &config.max_bounce_rate),
        ("reputation.max_complaint_rate", &config.max_complaint_rate),
    ] {
        let r = *rate.get_ref();
        if !(r > 0.0 && r <= 1.0) {
            return Err(BrokenRule::at(
                text,
                rate.span(),
                key,
                ReputationRule::NotARate(r),
            ));
        }
    }
    if config.default_key.len() > super::MAX_KEY_BYTES {
        return Err(BrokenRule::unlocated(
            "reputation.default_key",
            ReputationRule::DefaultKeyTooLong,
        ));
    }
    if config.key.is_none() && config.default_key != default_key() {
        return Err(BrokenRule::unlocated(
            "reputation.default_key",
            ReputationRule::DefaultKeyWithoutKey,
        ));
    }
    if let Some(sqs) = &config.sqs {
        let url = sqs.queue_url.get_ref();
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(BrokenRule::at(
                text,
                sqs.queue_url.span(),
                "reputation.sqs.queue_url",
                ReputationRule::NotQueueUrl,
            ));
        }
    }
    for topic in config.sns.iter().flat_map(|s| &s.topics) {
        let arn = topic.get_ref();
        if arn.split(':').count() != 6 || !arn.starts_with("arn:aws:sns:") {
            return Err(BrokenRule::at(
                text,
                topic.span(),
                "reputation.sns.topics",
                ReputationRule::NotTopicArn,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::KeySource;

    use super::Action;

    use crate::config::tests::parse_with as parse;

    #[test]
    fn pinned_example_parses_with_defaults() {
        let c = parse(
            "[reputation]\nkey = \"header:X-Tenant\"\nmax_bounce_rate = 0.05\n\
             max_complaint_rate = 0.001\nmin_messages = 100\nwindow_ms = 86400000\n\
             action = \"pause\"\nsuppress = true\n\
             [reputation.sqs]\nqueue_url = \"https://sqs.eu-west-1.amazonaws.com/123456789012/ses-events\"\n\
             region = \"eu-west-1\"\n",
        )
        .unwrap();
        let r = c.reputation.unwrap();
        assert_eq!(r.key.unwrap().0, KeySource::Header("X-Tenant".into()));
        assert_eq!(*r.action.get_ref(), Action::Pause);
        assert_eq!(r.suppress_ttl_ms.get(), 1_209_600_000);
        assert_eq!(r.max_tracked_messages.get(), 1_000_000);
        assert_eq!(r.default_key, "default");
        assert_eq!(r.sqs.unwrap().region, "eu-west-1");
        assert!(r.sns.is_none());
        assert!(!r.ses_sync);
        assert_eq!(r.ses_refresh_ms.get(), 300_000);
        let r = parse("[reputation]\nkey = \"auth\"\naction = \"reject\"\n")
            .unwrap()
            .reputation
            .unwrap();
        assert_eq!(
            (*r.max_bounce_rate.get_ref(), *r.action.get_ref()),
            (0.05, Action::Reject)
        );
    }

    #[test]
    fn bad_values_name_their_key_and_line() {
        for (body, key, line) in [
            ("key = \"moon\"\n", "reputation.key", 6),
            (
                "key = \"auth\"\nmax_bounce_rate = 1.5\n",
                "reputation.max_bounce_rate",
                7,
            ),
            (
                "key = \"auth\"\nmax_complaint_rate = 0.0\n",
                "reputation.max_complaint_rate",
                7,
            ),
            ("key = \"auth\"\naction = \"shout\"\n", "action", 7),
            ("key = \"auth\"\nmin_messages = 0\n", "min_messages", 7),
            ("key = \"auth\"\nbogus = 1\n", "bogus", 7),
            (
                "key = \"auth\"\n[reputation.sqs]\nqueue_url = \"ftp://x\"\nregion = \"r\"\n",
                "reputation.sqs.queue_url",
                8,
            ),
            (
                "key = \"auth\"\n[reputation.sns]\ntopics = [\"arn:aws:s3:::b\"]\n",
                "reputation.sns.topics",
                8,
            ),
            ("key = \"auth\"\n[reputation.sns]\ntopic = []\n", "topic", 8),
        ] {
            let err = parse(&format!("[reputation]\n{body}"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(key) && err.contains(&format!("line {line}")),
                "{body}: {err}"
            );
        }
    }

    #[test]
    fn without_a_key_a_message_counts_for_its_tenant() {
        let c = parse("[tenant]\nkey = \"header:X-Tenant\"\n[reputation]\n").unwrap();
        assert_eq!(c.reputation.unwrap().key, None, "the tenant's key");
        let own = "[tenant]\nkey = \"header:X-Tenant\"\n[reputation]\nkey = \"client-ip\"\n";
        let r = parse(own).unwrap().reputation.unwrap();
        assert_eq!(r.key.unwrap().0, KeySource::ClientIp, "its own key stands");
        let err = parse("[reputation]\ndefault_key = \"other\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("reputation.default_key") && err.contains("[tenant] default_key"),
            "{err}"
        );
    }

    #[test]
    fn admin_password_hash_is_checked() {
        let err = parse("[admin]\npassword_hash = \"secret\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("admin.password_hash") && err.contains("line 6"),
            "{err}"
        );
        let hash = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$hRh5UbO5V5zAcTz1r34tZgRfrqBvAdiE/lw+J3iU+Ls";
        let c = parse(&format!("[admin]\npassword_hash = \"{hash}\"\n")).unwrap();
        assert!(c.admin.unwrap().password_hash.is_some());
    }
}
