//! A key from its source, under the trust rules every reader of a key shares (layers,
//! `fair_by`, routes, `[tenant]`, the reputation guard): a header names a key only for a client
//! trusted to choose it, else the authenticated tenant stands; an empty key is the default.

use crate::config::{KeySource, MAX_KEY_BYTES};
use crate::message::header::Fields;

use super::{KeyRule, LayerPolicy, MessageFacts, Rules};

/// The key from `source` (a layer's `key` or `fair_by`), else `default_key`.
pub(super) fn key_of(
    source: &KeySource,
    default_key: &str,
    facts: &MessageFacts<'_>,
    fields: &Fields<'_>,
) -> String {
    let found = match source {
        KeySource::Auth => facts.auth_tenant.map(str::to_string),
        KeySource::Header(name) => facts
            .header_trusted
            .then(|| header_value(fields, name))
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

/// The reputation guard's key of a message as far as it is known before the message (at
/// MAIL): `None` without the guard, or when it depends on what comes later (a header a client
/// may set, the recipients).
pub fn reputation_key_early(rules: Rules<'_>, facts: &MessageFacts<'_>) -> Option<String> {
    key_early(rules.reputation_key?, facts)
}

/// The key of `rule` as far as it is known at MAIL: `None` when it depends on what comes
/// later.
pub(super) fn key_early(rule: KeyRule<'_>, facts: &MessageFacts<'_>) -> Option<String> {
    let no_fields = Fields::new(&[]);
    (!known_later(rule.source, facts))
        .then(|| key_of(rule.source, rule.default_key, facts, &no_fields))
}

/// Whether a key from `source` depends on what comes after MAIL: a header a client may set,
/// the recipients.
pub(super) fn known_later(source: &KeySource, facts: &MessageFacts<'_>) -> bool {
    match source {
        KeySource::Header(_) => facts.header_trusted,
        KeySource::RcptDomain => true,
        KeySource::Auth
        | KeySource::Sender
        | KeySource::SenderDomain
        | KeySource::ClientIp
        | KeySource::None => false,
    }
}

/// Whether a layer applies to the message (its `match`, if any, on a header).
pub(super) fn applies(layer: &LayerPolicy, fields: &Fields<'_>) -> bool {
    match &layer.matches {
        None => true,
        Some(m) => {
            header_value(fields, &m.header).is_some_and(|v| v.eq_ignore_ascii_case(m.value.trim()))
        }
    }
}

pub(super) fn domain_of(address: &str) -> Option<String> {
    address
        .rsplit_once('@')
        .map(|(_, domain)| domain.to_ascii_lowercase())
        .filter(|d| !d.is_empty())
}

/// The unfolded, trimmed value of the first field called `name`, if it is valid UTF-8.
fn header_value(fields: &Fields<'_>, name: &str) -> Option<String> {
    let text = std::str::from_utf8(fields.value(name)?).ok()?;
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
