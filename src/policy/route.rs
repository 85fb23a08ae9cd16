//! Which upstream carries a message: the first `[[route]]` whose key matches, its fallback,
//! and the header fields it adds. The key is read like a layer's (same sources, same trust),
//! so an authenticated tenant cannot route itself onto another tenant's account by a header.

use crate::config::{ses_name, KeySource, RouteConfig, MAX_KEY_BYTES};

use super::keys::{key_of, known_later};
use super::{MessageFacts, Rules};
use crate::message::header::Fields;

/// The way a message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The upstream's name.
    pub upstream: String,
    /// Tried when `upstream` cannot be reached.
    pub fallback: Option<String>,
    /// Fields to add after our `Received:`, rendered (`{key}` replaced and made safe).
    pub headers: Vec<(String, String)>,
    /// The upstream's own tenant the message is sent as (`ses_tenant`, rendered).
    pub upstream_tenant: Option<String>,
    /// `ses_tenant` rendered into a name SES does not take as it is (outside `[A-Za-z0-9_-]`,
    /// or past 64 characters), made printable: the message is refused rather than sent as the
    /// name reduced to SES's alphabet, which another tenant may have too (`a/b` and `a.b` both
    /// `a_b`). `upstream_tenant` is then `None`.
    pub unfit_tenant: Option<String>,
}

/// The route of a message whose tenant is `tenant`; `None` when there are routes and none
/// matches. Without routes, every message takes `first_upstream`.
pub(super) fn choose(
    rules: Rules<'_>,
    tenant: &str,
    facts: &MessageFacts<'_>,
    fields: &Fields<'_>,
) -> Option<Route> {
    if rules.routes.is_empty() {
        return Some(first(rules));
    }
    rules.routes.iter().find_map(|route| {
        let key = key_of(&route.key.0, "", facts, fields);
        route
            .matches(&key)
            .then(|| built(route, &key, Some(tenant)))
    })
}

/// The way every message goes when there are no routes.
fn first(rules: Rules<'_>) -> Route {
    Route {
        upstream: rules.first_upstream.to_string(),
        fallback: None,
        headers: Vec::new(),
        upstream_tenant: None,
        unfit_tenant: None,
    }
}

/// The route of a message as far as it is known at MAIL, before its header section: `None`
/// when a route up to the one that matches reads its key from what comes later (a header a
/// client may set, the recipients), or when none matches. `tenant` is the message's tenant
/// when known by then; without it a `{tenant}` in `ses_tenant` leaves its upstream tenant
/// unknown.
pub(super) fn choose_early(
    rules: Rules<'_>,
    tenant: Option<&str>,
    facts: &MessageFacts<'_>,
) -> Option<Route> {
    let no_fields = Fields::new(&[]);
    if rules.routes.is_empty() {
        return Some(first(rules));
    }
    for route in rules.routes {
        if known_later(&route.key.0, facts) {
            return None;
        }
        let key = key_of(&route.key.0, "", facts, &no_fields);
        if route.matches(&key) {
            return Some(built(route, &key, tenant));
        }
    }
    None
}

/// The way `route` sends a message whose route key is `key` and whose tenant is `tenant`.
fn built(route: &RouteConfig, key: &str, tenant: Option<&str>) -> Route {
    let named = (route.ses_tenant.as_ref()).and_then(|t| upstream_tenant(t.get_ref(), key, tenant));
    let (upstream_tenant, unfit_tenant) = match named {
        Some(TenantName::Fit(name)) => (Some(name), None),
        Some(TenantName::Unfit(shown)) => (None, Some(shown)),
        None => (None, None),
    };
    Route {
        upstream: route.upstream.get_ref().clone(),
        fallback: route.fallback.as_ref().map(|f| f.get_ref().clone()),
        headers: rendered(route, key),
        upstream_tenant,
        unfit_tenant,
    }
}

/// The longest unfit tenant name shown.
const UNFIT_SHOWN: usize = 80;

/// An SES tenant's name as a route renders it.
enum TenantName {
    /// SES takes it as it is.
    Fit(String),
    /// SES would not take it: made printable (and cut) to be shown in the refusal.
    Unfit(String),
}

/// `ses_tenant` with `{key}` and `{tenant}` replaced; `None` when it needs one that is empty
/// or not known.
fn upstream_tenant(template: &str, key: &str, tenant: Option<&str>) -> Option<TenantName> {
    if template.contains("{key}") && key.is_empty() {
        return None;
    }
    let mut name = template.replace("{key}", key);
    if name.contains("{tenant}") {
        let tenant = tenant.filter(|t| !t.is_empty())?;
        name = name.replace("{tenant}", tenant);
    }
    if ses_name(&name) {
        return Some(TenantName::Fit(name));
    }
    let mut shown = safe_key("x-other", &name);
    shown.truncate(UNFIT_SHOWN);
    Some(TenantName::Unfit(shown))
}

/// The route's `add_headers` with `{key}` replaced. A field whose value needs the key is left
/// out when there is none (an empty SES configuration set would make SES refuse the message).
fn rendered(route: &RouteConfig, key: &str) -> Vec<(String, String)> {
    (route.add_headers.iter())
        .filter(|(_, template)| !key.is_empty() || !template.contains("{key}"))
        .map(|(name, template)| {
            let value = template.replace("{key}", &safe_key(name, key));
            (name.clone(), value)
        })
        .collect()
}

/// `key` made safe for the field `name` (the key may come from a client's header): printable
/// ASCII only, so never a line break, a control, a bidirectional override (U+202E) or 8-bit
/// text in a header of a 7-bit session: every other character is replaced by `_`. For SES's
/// own fields (configuration set, message tags) only the characters SES takes,
/// `[A-Za-z0-9_-]`. At most `MAX_KEY_BYTES`, so that the field stays within the line length
/// the config checked (a key from the envelope can be longer than the keys the config knows).
fn safe_key(name: &str, key: &str) -> String {
    let ses = name
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("x-ses-"));
    key.chars()
        .take(MAX_KEY_BYTES)
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '-' => c,
            ' '..='~' if !ses => c,
            _ => '_',
        })
        .collect()
}

/// The header names routes read their key from and remove before forwarding.
pub(super) fn key_header_names(routes: &[RouteConfig]) -> impl Iterator<Item = &str> {
    routes
        .iter()
        .filter(|r| r.strip_key_header)
        .filter_map(|r| match &r.key.0 {
            KeySource::Header(name) => Some(name.as_str()),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_cannot_break_a_header_line() {
        assert_eq!(safe_key("X-Tag", "a\r\nBcc: x"), "a__Bcc: x");
        assert_eq!(safe_key("X-SES-CONFIGURATION-SET", "ac me/1"), "ac_me_1");
        assert_eq!(safe_key("x-ses-message-tags", "t=é"), "t__");
        assert_eq!(safe_key("X-Other", "ünï"), "_n_");
        assert_eq!(safe_key("X-Other", "a\u{202e}b c"), "a_b c");
        assert_eq!(safe_key("X-Other", &"k".repeat(5000)).len(), MAX_KEY_BYTES);
    }
}
