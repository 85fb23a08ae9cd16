//! [`Identity`]: every key a message has, read in one pass over its header section, typed,
//! once: what the rest of the message's journey reads instead of the message.

use std::ops::Range;

use crate::message::header::Fields;
use crate::message::received::Hops;
use crate::throttle::Charge;

use super::charges::{blame_of, charges, LayerSet};
use super::keys::key_of;
use super::route::{self, Route};
use super::senders::{from_addresses, Binding};
use super::{KeyRule, MessageFacts, Rules};

/// Who a message is and where it goes, as the relay reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Where it goes; `None` when routes are configured and none matches.
    pub route: Option<Route>,
    /// The charges of the layers that apply to the message on its route, in layer order: one
    /// per layer, or for an `rcpt-domain` layer one per recipient domain.
    pub charges: Vec<Charge>,
    /// What the layers scoped to the route's fallback add if it goes there.
    pub fallback_charges: Vec<Charge>,
    /// The byte ranges of the fields to remove (whole fields, in message order): key headers,
    /// the client's own fields of the names the route adds, and its `X-SES-CONFIGURATION-SET`.
    pub key_headers: Vec<Range<usize>>,
    /// Whose message it is (`[tenant]`): its webhooks' tenant, `{tenant}` in a route.
    pub tenant: String,
    /// Whose reputation it counts for: its tenant, or `[reputation] key`'s own; `None`
    /// without the guard.
    pub reputation_key: Option<String>,
    /// Its `Received:` fields: how many, and whether one is ours.
    pub hops: Hops,
    /// Its `traceparent` field's value, trimmed: the trace its spans join.
    pub traceparent: Option<String>,
    /// The addresses of its `From:` fields, read only when something checks them (a user's
    /// `senders`; an upstream tenant's identities for a null envelope sender); else empty.
    pub from: Vec<String>,
    /// The AUTH user's `senders` every `From:` address must be inside; `None` without them.
    pub binding: Option<Binding>,
}

impl Identity {
    /// The fields its route adds, written after our `Received:` field.
    pub fn route_fields(&self) -> Vec<u8> {
        let mut fields = Vec::new();
        for (name, value) in self.route.iter().flat_map(|r| &r.headers) {
            fields.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        fields
    }

    /// The pieces of `message` that go upstream: all of it but the key headers.
    pub fn forwarded<'a>(&'a self, message: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let starts = std::iter::once(0).chain(self.key_headers.iter().map(|r| r.end));
        let ends = (self.key_headers.iter().map(|r| r.start)).chain(std::iter::once(message.len()));
        starts.zip(ends).map(move |(from, to)| &message[from..to])
    }
}

/// SES's configuration set, read by its SMTP endpoint and by our `ses://`: it decides where
/// SES sends the message's bounces and complaints, so it is the route's or the upstream's to
/// choose, never a client's (a tenant naming a set without event destinations would hide its
/// bounces from the reputation guard).
const CONFIGURATION_SET: &str = "X-SES-CONFIGURATION-SET";

/// The identity of a message, from one pass over its header section.
pub fn identify(rules: Rules<'_>, facts: &MessageFacts<'_>) -> Identity {
    let message = facts.message;
    let fields = Fields::new(message);
    let key = |rule: KeyRule<'_>| key_of(rule.source, rule.default_key, facts, &fields);
    let tenant = key(rules.tenant);
    let reputation_key = (rules.reputation_key).map(|rule| match rule == rules.tenant {
        true => tenant.clone(),
        false => key(rule),
    });
    let route = route::choose(rules, &tenant, facts, &fields);
    let upstream = route.as_ref().map(|r| r.upstream.as_str());
    let fallback = route.as_ref().and_then(|r| r.fallback.as_deref());
    let blame = blame_of(rules.layers, facts, &fields);
    let charged = |set| charges(rules.layers, set, &blame, facts, &fields);
    let mut key_headers = key_headers(rules, message, &fields);
    let added = (route.iter()).flat_map(|r| r.headers.iter().map(|(name, _)| name.as_str()));
    let removed = added.chain([CONFIGURATION_SET]);
    key_headers.extend(named_fields(message, &fields, removed));
    key_headers.sort_by_key(|r| r.start);
    key_headers.dedup();
    let tenant_sender =
        facts.sender.is_none() && (route.as_ref()).is_some_and(|r| r.upstream_tenant.is_some());
    let from = match facts.binding.is_some() || tenant_sender {
        true => from_addresses(message, &fields),
        false => Vec::new(),
    };
    Identity {
        from,
        binding: facts.binding.cloned(),
        charges: charged(LayerSet {
            upstream,
            unscoped: true,
        }),
        fallback_charges: fallback.map_or_else(Vec::new, |f| {
            charged(LayerSet {
                upstream: Some(f),
                unscoped: false,
            })
        }),
        tenant,
        reputation_key,
        hops: Hops::of(message, &fields, rules.instance),
        traceparent: (fields.value("traceparent"))
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(|v| v.trim().to_string()),
        route,
        key_headers,
    }
}

/// The fields of `message` that a key of the config reads (a layer's key or `fair_by`, a
/// route's, `[tenant]`'s, `[reputation]`'s `header:`), stripped or not: the relay's own
/// routing hints. A report carries its original's only to be keyed as it was, and never
/// copies them for its reader. In message order.
pub fn key_fields(rules: Rules<'_>, message: &[u8]) -> Vec<Range<usize>> {
    use crate::config::KeySource;
    let layers = (rules.layers.iter()).flat_map(|l| std::iter::once(&l.key).chain(&l.fair_by));
    let routes = rules.routes.iter().map(|r| &r.key.0);
    let owners = std::iter::once(rules.tenant.source).chain(rules.reputation_key.map(|r| r.source));
    let names = (layers.chain(routes).chain(owners)).filter_map(|source| match source {
        KeySource::Header(name) => Some(name.as_str()),
        _ => None,
    });
    named_fields(message, &Fields::new(message), names)
}

/// The fields named by the key of a layer or route that strips its key header: a key header
/// is a routing hint for this relay, not content for the recipient.
fn key_headers(rules: Rules<'_>, message: &[u8], fields: &Fields<'_>) -> Vec<Range<usize>> {
    use crate::config::KeySource;
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
