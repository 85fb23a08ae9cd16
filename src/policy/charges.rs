//! What each layer charges a message: its key, its cost, its fair key, and whom an adaptive
//! layer blames for a throttle reply to it.

use crate::config::{Cost, KeySource};
use crate::message::header::Fields;
use crate::throttle::Charge;

use super::keys::{applies, domain_of, key_of};
use super::{LayerPolicy, MessageFacts};

/// Which layers a message on a route is charged to.
#[derive(Clone, Copy)]
pub(super) struct LayerSet<'a> {
    /// The upstream whose own layers (`upstream = ...`) apply; `None` for no route.
    pub upstream: Option<&'a str>,
    /// Whether the layers scoped to no upstream apply too.
    pub unscoped: bool,
}

/// The charges of the layers that apply to a message in `set`, in layer order: one per
/// layer, or for an `rcpt-domain` layer one per recipient domain; `blame` is whom an adaptive
/// layer blames for it (see [`blame_of`]).
pub(super) fn charges(
    layers: &[LayerPolicy],
    set: LayerSet<'_>,
    blame: &str,
    facts: &MessageFacts<'_>,
    fields: &Fields<'_>,
) -> Vec<Charge> {
    (layers.iter().enumerate())
        .filter(|(_, l)| match &l.upstream {
            None => set.unscoped,
            Some(u) => set.upstream == Some(u.as_str()),
        })
        .filter(|(_, layer)| applies(layer, fields))
        .flat_map(|(index, layer)| layer_charges((index, layer), blame, facts, fields))
        .collect()
}

/// Whom an adaptive layer blames for a throttle reply to the message, to tell one sender's
/// replies from the shared rate's (see `Charge::blame`): its key in the first applying layer
/// keyed by anything but `none` or `rcpt-domain` (a domain is not a sender); empty when none.
/// The layers' own, not `[tenant]`: a reply is blamed on what the layers tell apart.
pub(super) fn blame_of(
    layers: &[LayerPolicy],
    facts: &MessageFacts<'_>,
    fields: &Fields<'_>,
) -> String {
    (layers.iter())
        .filter(|l| !matches!(l.key, KeySource::None | KeySource::RcptDomain))
        .find(|l| applies(l, fields))
        .map(|l| key_of(&l.key, &l.default_key, facts, fields))
        .unwrap_or_default()
}

/// What one layer charges a message: one charge, or for a layer keyed by recipient domain one
/// per domain, each domain's recipients to its own bucket.
fn layer_charges(
    (index, layer): (usize, &LayerPolicy),
    blame: &str,
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
        blame: match fair.is_empty() {
            true => blame.to_string(),
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
