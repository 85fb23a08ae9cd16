//! Which buckets a message is charged to, how much, and which of its headers are routing hints
//! for this relay (key headers, removed before forwarding). Kept apart from the session so that
//! the rules a tenant could try to game (header keys) are in one place, and computed in one
//! pass over the header section: the session gets a [`Plan`] and never asks again.

use std::net::IpAddr;
use std::ops::Range;

use crate::config::{Cost, KeySource, MatchSpec, ThrottleConfig};

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
    /// One charge per layer that applies to the message, in layer order.
    pub charges: Vec<Charge>,
    /// The byte ranges of the key headers to remove (whole fields, in message order).
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

/// The charges and key headers of a message.
pub fn plan(layers: &[LayerPolicy], facts: &MessageFacts<'_>) -> Plan {
    let fields = header_fields(facts.message);
    let charges = layers
        .iter()
        .enumerate()
        .filter(|(_, layer)| applies(layer, facts.message, &fields))
        .map(|(layer_index, layer)| Charge {
            layer: layer_index,
            key: key_of(&layer.key, &layer.default_key, facts, &fields),
            cost: match layer.cost {
                Cost::Recipients => facts.rcpts.len() as u64,
                Cost::Message => 1,
            },
            fair: (layer.fair_by.as_ref())
                .map(|src| key_of(src, &layer.default_key, facts, &fields))
                .unwrap_or_default(),
        })
        .collect();
    Plan {
        charges,
        key_headers: key_headers(layers, facts.message, &fields),
    }
}

/// The charges of a message, one per layer that applies to it, in layer order.
pub fn charges(layers: &[LayerPolicy], facts: &MessageFacts<'_>) -> Vec<Charge> {
    plan(layers, facts).charges
}

fn applies(layer: &LayerPolicy, message: &[u8], fields: &[Field]) -> bool {
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
    fields: &[Field],
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

/// Longest key kept from a header: keys are map entries and log fields, so a hostile
/// header must not make them large.
const MAX_KEY_BYTES: usize = 128;

/// One header field of the message: its name and the byte range of the whole field,
/// continuation lines and final CRLF included.
#[derive(Debug, Clone)]
struct Field {
    name: Range<usize>,
    whole: Range<usize>,
}

/// The fields of the header section (up to the first empty line), unfolded by range.
fn header_fields(message: &[u8]) -> Vec<Field> {
    let mut fields: Vec<Field> = Vec::new();
    let mut pos = 0;
    while pos < message.len() {
        let end = message[pos..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map_or(message.len(), |i| pos + i + 2);
        let line = &message[pos..end];
        if line == b"\r\n" {
            break;
        }
        match (line.first(), fields.last_mut()) {
            (Some(b' ' | b'\t'), Some(last)) => last.whole.end = end,
            _ => {
                if let Some(colon) = line.iter().position(|&b| b == b':') {
                    fields.push(Field {
                        name: pos..pos + colon,
                        whole: pos..end,
                    });
                }
            }
        }
        pos = end;
    }
    fields
}

/// The unfolded, trimmed value of the first field called `name`, if it is valid UTF-8.
fn header_value(message: &[u8], fields: &[Field], name: &str) -> Option<String> {
    let field = fields.iter().find(|f| {
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

/// The fields named by the key of a layer that strips its key header: a key header is a
/// routing hint for this relay, not content for the recipient.
fn key_headers(layers: &[LayerPolicy], message: &[u8], fields: &[Field]) -> Vec<Range<usize>> {
    let names: Vec<&str> = layers
        .iter()
        .filter(|l| l.strip_key_header)
        .flat_map(|l| std::iter::once(&l.key).chain(&l.fair_by))
        .filter_map(|source| match source {
            KeySource::Header(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    fields
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

/// The message without the key headers of the layers that strip theirs.
pub fn strip_key_headers(layers: &[LayerPolicy], message: Vec<u8>) -> Vec<u8> {
    let fields = header_fields(&message);
    let key_headers = key_headers(layers, &message, &fields);
    if key_headers.is_empty() {
        return message;
    }
    let plan = Plan {
        charges: Vec::new(),
        key_headers,
    };
    plan.forwarded(&message).collect::<Vec<_>>().concat()
}

#[cfg(test)]
mod tests;
