//! The label sets of the relay's own metric families (the others' are beside their
//! families): each is per layer, per outcome or per reason, never per key, keys being
//! unbounded.

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LayerLabel {
    pub layer: String,
}

/// Why upstream throttled: `rate`, `quota` or `connections`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
    pub upstream: String,
}

/// What decided a message the shared store could not: `local`, `reject` or `allow`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OnErrorLabel {
    pub on_error: &'static str,
}

/// What an SES event was: `bounce`, `complaint`, `ignored` or `malformed`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

/// Why a connection was closed for its PROXY header: `missing`, `malformed`, `truncated`,
/// `slow`, `local_trusted` (no client named, from a trusted balancer) or `not_allowed` (from
/// outside `proxy_from`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProxyLabel {
    pub reason: &'static str,
}

/// Every `reason` of [`ProxyLabel`], each shown from 0.
pub const PROXY_REFUSALS: [&str; 6] = [
    "missing",
    "malformed",
    "truncated",
    "slow",
    "local_trusted",
    "not_allowed",
];
