//! `[[throttle]]`: one layer of buckets. The types here are the throttle's own vocabulary
//! (mode, refill, cost, store), kept with the schema so that the throttle engine reads them
//! without knowing TOML; `throttle::setup` turns a layer into the engine's spec.

use std::collections::BTreeMap;
use std::num::{NonZeroU64, NonZeroUsize};

use serde::Deserialize;
use toml::Spanned;

use super::{BadKeySource, KeySource};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cost {
    Recipients,
    Message,
}

/// What a layer does when the tokens are not there now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Wait in FIFO order, up to `max_wait` from arrival.
    #[default]
    Wait,
    /// Refuse at once with the time until the tokens would be there.
    Reject,
    /// Wait as `Wait`; a message whose tokens have not come by then is held in the spool
    /// (`[spool]`), answered `250`, and released at the layer's rate.
    Hold,
}

/// How an adaptive layer's limit answers a throttle reply of upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Adapt {
    /// To what upstream accepted over the last interval, less a margin (see `adaptive`).
    #[default]
    Measured,
    /// To 70 %, at most once per interval (the earlier rule, kept for comparison).
    Multiplicative,
}

/// How a bucket refills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Refill {
    /// Holds `burst`, gains `limit` every `interval`, gradually.
    #[default]
    Drip,
    /// Holds `limit`; refilled to full exactly `interval` after the window's first take.
    FixedWindow,
    /// A lifetime cap of `burst` that never refills; forgotten after `idle_ttl` without a take.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Local,
    Redis,
}

/// A layer applies only to messages whose header `header` equals `value` (case-insensitive).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    pub header: String,
    pub value: String,
}

/// A `[[throttle]]` layer's rules that no single key's type can say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerRule {
    #[error("duplicate layer name")]
    DuplicateName,
    #[error("needs a header name and a value to compare")]
    MatchIncomplete,
    #[error("a fixed_window layer holds `limit`; leave burst out")]
    BurstInFixedWindow,
    #[error("weights share the turns of `fair_by`; set it")]
    WeightsWithoutFairBy,
    #[error(
        "\"account\" is for only a `key = \"none\"` layer scoped (`upstream`) to a ses:// upstream"
    )]
    AccountNotSesScoped,
    #[error("\"account\" is for only a drip layer that does not learn (`adaptive`)")]
    AccountLearned,
    #[error("\"account\" is for only an in-process layer (`store = \"local\"`)")]
    AccountShared,
}

/// `fair_by`: a key source like `key`, named in its own errors.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct FairBy(pub KeySource);

impl TryFrom<String> for FairBy {
    type Error = BadKeySource;

    fn try_from(text: String) -> Result<FairBy, BadKeySource> {
        KeySource::parse_for("throttle.fair_by", &text).map(FairBy)
    }
}

/// A layer's `limit`: tokens per `interval_ms`, or `"account"`: an SES account's own
/// `MaxSendRate`, read from `GetAccount` at run time (`serve::account`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Fixed(NonZeroU64),
    Account,
}

impl Limit {
    /// The limit the layer is built with: an account layer starts at 1 (SES's own floor) until
    /// `GetAccount` answers.
    pub fn get(self) -> u64 {
        match self {
            Limit::Fixed(n) => n.get(),
            Limit::Account => 1,
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Limit, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Fixed(NonZeroU64),
            Named(String),
        }
        match Raw::deserialize(d) {
            Ok(Raw::Fixed(n)) => Ok(Limit::Fixed(n)),
            Ok(Raw::Named(s)) if s == "account" => Ok(Limit::Account),
            _ => Err(serde::de::Error::custom(
                "a positive number, or \"account\" (an SES account's own MaxSendRate)",
            )),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottleConfig {
    pub name: Spanned<String>,
    pub key: KeySource,
    #[serde(default = "default_key")]
    pub default_key: String,
    #[serde(default = "default_cost")]
    pub cost: Cost,
    pub limit: Limit,
    #[serde(default = "default_interval_ms")]
    pub interval_ms: NonZeroU64,
    pub burst: Option<NonZeroU64>,
    /// Spanned: a hold-mode layer without `[spool]` is reported at this key's line.
    #[serde(default = "default_mode")]
    pub mode: Spanned<Mode>,
    #[serde(default = "default_max_wait_ms")]
    pub max_wait_ms: u64,
    #[serde(default = "default_max_queue")]
    pub max_queue: NonZeroUsize,
    /// A hold-mode layer's most messages held in the spool per key; past it `451 4.7.1`.
    #[serde(default = "default_max_held")]
    pub max_held: NonZeroUsize,
    #[serde(default = "default_max_keys")]
    pub max_keys: NonZeroUsize,
    #[serde(default)]
    pub refill: Refill,
    #[serde(default = "default_idle_ttl_ms")]
    pub idle_ttl_ms: NonZeroU64,
    #[serde(rename = "match")]
    pub match_: Option<Spanned<MatchSpec>>,
    #[serde(default)]
    pub store: StoreKind,
    #[serde(default)]
    pub charge_failures: bool,
    #[serde(default = "default_true")]
    pub strip_key_header: bool,
    /// Learn the effective limit from upstream's throttle replies; default: for a `key =
    /// "none"` drip layer (the one that stands for the provider's account).
    pub adaptive: Option<bool>,
    /// The floor of an adaptive layer; default `limit / 10`, at least 1.
    pub min_limit: Option<NonZeroU64>,
    /// How an adaptive layer learns from a throttle reply (default `measured`).
    #[serde(default)]
    pub adapt: Adapt,
    /// Serve this layer's waiters in turn by this key (same sources and trust as `key`), so
    /// one tenant's backlog in a shared bucket does not hold back the others.
    pub fair_by: Option<FairBy>,
    /// Apply only to messages carried by this upstream (each account has its own rate).
    pub upstream: Option<Spanned<String>>,
    /// Shares of the turns per fair key (default 1); needs `fair_by`.
    #[serde(default)]
    pub weights: BTreeMap<String, NonZeroU64>,
}

impl ThrottleConfig {
    /// Tokens held: `burst`, or `limit` when it is not set.
    pub fn burst(&self) -> u64 {
        self.burst.map_or(self.limit.get(), NonZeroU64::get)
    }

    /// The floor of the effective limit when the layer is adaptive (only drip layers are).
    pub fn adaptive_floor(&self) -> Option<u64> {
        // An account layer's limit is the provider's word, not learned.
        let default = self.key == KeySource::None
            && self.refill == Refill::Drip
            && self.limit != Limit::Account;
        let on = self.adaptive.unwrap_or(default) && self.refill == Refill::Drip;
        let min = (self.min_limit.map(|m| m.get())).unwrap_or(self.limit.get() / 10);
        on.then(|| min.clamp(1, self.limit.get()))
    }

    pub fn name(&self) -> &str {
        self.name.get_ref()
    }
}

fn default_key() -> String {
    "default".into()
}
fn default_cost() -> Cost {
    Cost::Recipients
}
fn default_interval_ms() -> NonZeroU64 {
    NonZeroU64::new(1000).unwrap()
}
fn default_mode() -> Spanned<Mode> {
    Spanned::new(0..0, Mode::default())
}
fn default_max_wait_ms() -> u64 {
    25_000
}
fn default_max_queue() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap()
}
fn default_max_held() -> NonZeroUsize {
    NonZeroUsize::new(100_000).unwrap()
}
fn default_max_keys() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap()
}
fn default_idle_ttl_ms() -> NonZeroU64 {
    NonZeroU64::new(604_800_000).unwrap()
}
fn default_true() -> bool {
    true
}
