//! Which upstream a message takes (`route`), which buckets it is charged to, how much, and which
//! of its headers are routing hints for this relay (key headers, removed before forwarding).
//! Kept apart from the session so that the rules a tenant could try to game (header keys) are
//! in one place, and computed in one pass over the header section: the session gets a [`Plan`]
//! and never asks again.

use std::net::IpAddr;
use std::ops::Range;

use crate::config::{Cost, KeySource, MatchSpec, RouteConfig, ThrottleConfig};

mod route;

pub use route::Route;

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
}

pub use crate::throttle::Charge;

/// What the policy decided for one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Where it goes; `None` when routes are configured and none matches.
    pub route: Option<Route>,
    /// The charges of the layers that apply to the message on its route, in layer order: one
    /// per layer, or for an `rcpt-domain` layer one per recipient domain.
    pub charges: Vec<Charge>,
    /// What the layers scoped to the route's fallback add if it goes there.
    pub fallback_charges: Vec<Charge>,
    /// The byte ranges of the fields to remove (whole fields, in message order): key headers,
    /// and the client's own fields of the names the route adds.
    pub key_headers: Vec<Range<usize>>,
}

impl Plan {
    /// The pieces of `message` that go upstream: all of it but the key headers.
    pub fn forwarded<'a>(&'a self, message: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let starts = std::iter::once(0).chain(self.key_headers.iter().map(|r| r.end));
        let ends = (self.key_headers.iter().map(|r| r.start)).chain(std::iter::once(message.len()));
        starts.zip(ends).map(move |(from, to)| &message[from..to])
    }
}

/// What a plan is made from besides the message: the layers, the routes, and the upstream
/// of a message when there are no routes.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    pub layers: &'a [LayerPolicy],
    pub routes: &'a [RouteConfig],
    pub first_upstream: &'a str,
}

/// The route, charges and key headers of a message.
pub fn plan(rules: Rules<'_>, facts: &MessageFacts<'_>) -> Plan {
    let fields = Fields::new(facts.message);
    let route = route::choose(rules.routes, rules.first_upstream, facts, &fields);
    let upstream = route.as_ref().map(|r| r.upstream.as_str());
    let fallback = route.as_ref().and_then(|r| r.fallback.as_deref());
    let tenant = tenant_of(rules.layers, facts, &fields);
    let charges = |scope: Option<&str>, unscoped: bool| -> Vec<Charge> {
        (rules.layers.iter().enumerate())
            .filter(|(_, l)| match &l.upstream {
                None => unscoped,
                Some(u) => scope == Some(u.as_str()),
            })
            .filter(|(_, layer)| applies(layer, facts.message, &fields))
            .flat_map(|(index, layer)| layer_charges((index, layer), &tenant, facts, &fields))
            .collect()
    };
    let mut key_headers = key_headers(rules, facts.message, &fields);
    if let Some(route) = &route {
        let added = route.headers.iter().map(|(name, _)| name.as_str());
        key_headers.extend(named_fields(facts.message, &fields, added));
        key_headers.sort_by_key(|r| r.start);
        key_headers.dedup();
    }
    Plan {
        charges: charges(upstream, true),
        fallback_charges: fallback.map_or_else(Vec::new, |f| charges(Some(f), false)),
        route,
        key_headers,
    }
}

/// Whose reputation a message counts for (`[reputation] key`), read with a layer's trust
/// rules: a header cannot move an authenticated client onto another tenant.
pub fn reputation_key(source: &KeySource, default_key: &str, facts: &MessageFacts<'_>) -> String {
    let fields = Fields::new(facts.message);
    key_of(source, default_key, facts, &fields)
}

/// The reputation key as far as it is known before the message (at MAIL): `None` when it
/// depends on what comes later (a header a client may set, the recipients).
pub fn reputation_key_early(
    source: &KeySource,
    default_key: &str,
    facts: &MessageFacts<'_>,
) -> Option<String> {
    let later = match source {
        KeySource::Header(_) => facts.header_trusted,
        KeySource::RcptDomain => true,
        KeySource::Auth
        | KeySource::Sender
        | KeySource::SenderDomain
        | KeySource::ClientIp
        | KeySource::None => false,
    };
    (!later).then(|| key_of(source, default_key, facts, &Fields::new(&[])))
}

/// What one layer charges a message: one charge, or for a layer keyed by recipient domain one
/// per domain, each domain's recipients to its own bucket.
/// Whose message it is, for an adaptive layer that must tell one tenant's throttle replies
/// from the shared rate's (see `Charge::tenant`): its key in the first applying layer keyed
/// by anything but `none` or `rcpt-domain` (a domain is not a tenant); empty when none.
fn tenant_of(layers: &[LayerPolicy], facts: &MessageFacts<'_>, fields: &Fields<'_>) -> String {
    (layers.iter())
        .filter(|l| !matches!(l.key, KeySource::None | KeySource::RcptDomain))
        .find(|l| applies(l, facts.message, fields))
        .map(|l| key_of(&l.key, &l.default_key, facts, fields))
        .unwrap_or_default()
}

fn layer_charges(
    (index, layer): (usize, &LayerPolicy),
    tenant: &str,
    facts: &MessageFacts<'_>,
    fields: &Fields<'_>,
) -> Vec<Charge> {
    let fair = (layer.fair_by.as_ref())
        .map(|src| key_of(src, &layer.default_key, facts, fields))
        .unwrap_or_default();
    let charge = |key: String, recipients: usize| Charge {
        layer: index,
        key,
        cost: match layer.cost {
            Cost::Recipients => recipients as u64,
            Cost::Message => 1,
        },
        fair: fair.clone(),
        tenant: match fair.is_empty() {
            true => tenant.to_string(),
            false => fair.clone(),
        },
    };
    if layer.key != KeySource::RcptDomain || facts.rcpts.len() < 2 {
        let key = key_of(&layer.key, &layer.default_key, facts, fields);
        return vec![charge(key, facts.rcpts.len())];
    }
    let mut domains: Vec<(String, usize)> = Vec::new();
    for rcpt in facts.rcpts {
        let domain = domain_of(rcpt).unwrap_or_else(|| layer.default_key.clone());
        match domains.iter_mut().find(|(d, _)| *d == domain) {
            Some((_, n)) => *n += 1,
            None => domains.push((domain, 1)),
        }
    }
    domains.into_iter().map(|(d, n)| charge(d, n)).collect()
}

fn applies(layer: &LayerPolicy, message: &[u8], fields: &Fields<'_>) -> bool {
    match &layer.matches {
        None => true,
        Some(m) => header_value(message, fields, &m.header)
            .is_some_and(|v| v.eq_ignore_ascii_case(m.value.trim())),
    }
}

/// The key from `source` (a layer's `key` or `fair_by`), else `default_key`.
fn key_of(
    source: &KeySource,
    default_key: &str,
    facts: &MessageFacts<'_>,
    fields: &Fields<'_>,
) -> String {
    let found = match source {
        KeySource::Auth => facts.auth_tenant.map(str::to_string),
        KeySource::Header(name) => facts
            .header_trusted
            .then(|| header_value(facts.message, fields, name))
            .flatten()
            .filter(|key| !key.is_empty())
            .or_else(|| facts.auth_tenant.map(str::to_string)),
        KeySource::Sender => facts.sender.map(str::to_ascii_lowercase),
        KeySource::SenderDomain => facts.sender.and_then(domain_of),
        KeySource::RcptDomain => facts.rcpts.first().and_then(|r| domain_of(r)),
        KeySource::ClientIp => Some(facts.client_ip.to_string()),
        KeySource::None => Some(String::new()),
    };
    match found {
        Some(key) if !key.is_empty() || *source == KeySource::None => key,
        _ => default_key.to_string(),
    }
}

fn domain_of(address: &str) -> Option<String> {
    address
        .rsplit_once('@')
        .map(|(_, domain)| domain.to_ascii_lowercase())
        .filter(|d| !d.is_empty())
}

use crate::config::MAX_KEY_BYTES;
use crate::message::header::Fields;

/// The unfolded, trimmed value of the first field called `name`, if it is valid UTF-8.
fn header_value(message: &[u8], fields: &Fields<'_>, name: &str) -> Option<String> {
    let field = fields.all().iter().find(|f| {
        message[f.name.clone()]
            .trim_ascii()
            .eq_ignore_ascii_case(name.as_bytes())
    })?;
    let raw = &message[field.name.end + 1..field.whole.end];
    let text = std::str::from_utf8(raw).ok()?;
    let unfolded: String = text
        .split("\r\n")
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    let value = unfolded.trim();
    let mut cut = value.len().min(MAX_KEY_BYTES);
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(value[..cut].to_string())
}

/// The fields named by the key of a layer or route that strips its key header: a key header
/// is a routing hint for this relay, not content for the recipient.
fn key_headers(rules: Rules<'_>, message: &[u8], fields: &Fields<'_>) -> Vec<Range<usize>> {
    let names = (rules.layers.iter())
        .filter(|l| l.strip_key_header)
        .flat_map(|l| std::iter::once(&l.key).chain(&l.fair_by))
        .filter_map(|source| match source {
            KeySource::Header(name) => Some(name.as_str()),
            _ => None,
        })
        .chain(route::key_header_names(rules.routes));
    named_fields(message, fields, names)
}

/// The byte ranges of the fields called one of `names` (case-insensitive).
fn named_fields<'a>(
    message: &[u8],
    fields: &Fields<'_>,
    names: impl Iterator<Item = &'a str>,
) -> Vec<Range<usize>> {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        return Vec::new();
    }
    fields
        .all()
        .iter()
        .filter(|f| {
            let name = message[f.name.clone()].trim_ascii();
            names
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
        })
        .map(|f| f.whole.clone())
        .collect()
}

#[cfg(test)]
mod tests;
