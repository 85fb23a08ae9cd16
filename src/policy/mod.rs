//! A message's identity: every key the relay reads from it, in one pass over its header
//! section. Which upstream it takes (`route`), which buckets it is charged to and how much
//! (`charges`), which of its headers are routing hints for this relay (key headers, removed
//! before forwarding), whose message it is (its tenant, `[tenant]`), whose reputation it counts
//! for, its hops and its `traceparent`.
//! Kept apart from the session so that the rules a tenant could try to game (header keys) are
//! in one place: the session gets an [`Identity`] and nothing asks again.
//!
//! - `identity`: [`Identity`] and [`identify`], the one pass.
//! - `keys`: a key from its source (`auth`, `header:`, `sender`, ...) under the trust rules.
//! - `charges`: what each layer charges a message.
//! - `route`: the route a message takes.
//! - `senders`: the addresses of its `From:` fields (read strictly as address lists,
//!   `senders/address_list.rs`), and the AUTH user's `senders` they are held to.

use std::net::IpAddr;

use crate::config::{Cost, KeySource, MatchSpec, RouteConfig, ThrottleConfig};

mod charges;
mod identity;
mod keys;
mod route;
mod senders;

pub use crate::throttle::Charge;
pub use identity::{identify, key_fields, Identity};
pub use keys::reputation_key_early;
pub use route::Route;

/// The route of a message as far as it is known at MAIL (see `route::choose_early`).
pub fn route_early(rules: Rules<'_>, facts: &MessageFacts<'_>) -> Option<Route> {
    // Read only when a route's `ses_tenant` names it: this runs at every MAIL.
    let named = (rules.routes.iter())
        .any(|r| (r.ses_tenant.as_ref()).is_some_and(|t| t.get_ref().contains("{tenant}")));
    let tenant = named
        .then(|| keys::key_early(rules.tenant, facts))
        .flatten();
    route::choose_early(rules, tenant.as_deref(), facts)
}
pub use senders::{Binding, FromRefusal};

/// One `[[throttle]]` layer's rules for choosing a key and a cost (the bucket math is in
/// `throttle`; this is only what a message is charged).
#[derive(Debug, Clone)]
pub struct LayerPolicy {
    pub name: String,
    pub key: KeySource,
    pub default_key: String,
    pub cost: Cost,
    pub matches: Option<MatchSpec>,
    pub strip_key_header: bool,
    /// The source of the fair key (`fair_by`), computed like the key.
    pub fair_by: Option<KeySource>,
    /// The upstream whose messages alone the layer applies to.
    pub upstream: Option<String>,
}

impl LayerPolicy {
    pub fn from_config(layer: &ThrottleConfig) -> LayerPolicy {
        LayerPolicy {
            name: layer.name.get_ref().clone(),
            key: layer.key.clone(),
            default_key: layer.default_key.clone(),
            cost: layer.cost,
            matches: layer.match_.as_ref().map(|m| m.get_ref().clone()),
            strip_key_header: layer.strip_key_header,
            fair_by: layer.fair_by.as_ref().map(|f| f.0.clone()),
            upstream: layer.upstream.as_ref().map(|u| u.get_ref().clone()),
        }
    }
}

/// What the policy may look at: the envelope, who sent it, and the header section.
pub struct MessageFacts<'a> {
    /// The authenticated user's tenant (or user name). When set, it is the key of every
    /// `auth` layer, and of every `header:` layer unless `header_trusted`: a header cannot
    /// move a client out of its tenant's bucket.
    pub auth_tenant: Option<&'a str>,
    /// Whether the client may choose its key with a header: it is in `trusted_networks`
    /// (and did not AUTH), or its user has `trust_key_header`. Otherwise `header:` layers
    /// ignore the header and use the tenant, or `default_key`.
    pub header_trusted: bool,
    pub sender: Option<&'a str>,
    pub rcpts: &'a [String],
    pub client_ip: IpAddr,
    pub message: &'a [u8],
    /// The AUTH user's `senders`, when it has them: every `From:` address must be inside.
    pub binding: Option<&'a Binding>,
}

/// A key read from its source, else its default: `[tenant]`'s, or `[reputation]`'s own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRule<'a> {
    pub source: &'a KeySource,
    pub default_key: &'a str,
}

/// What an identity is read with besides the message: the layers, the routes, the upstream
/// of a message when there are no routes, whose message it is, the reputation guard's key,
/// and this process's mark.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    pub layers: &'a [LayerPolicy],
    pub routes: &'a [RouteConfig],
    pub first_upstream: &'a str,
    /// Whose message it is (`[tenant]`).
    pub tenant: KeyRule<'a>,
    /// Whose reputation it counts for: the tenant's rule unless `[reputation] key` names its
    /// own; `None` without `[reputation]`.
    pub reputation_key: Option<KeyRule<'a>>,
    /// This process's id, the mark of its `Received:` fields.
    pub instance: &'a str,
}

#[cfg(test)]
mod tests;
