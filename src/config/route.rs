//! `[[route]]`: which upstream carries a message. Routes are read in order and the first whose
//! key matches wins; the key comes from the same sources, with the same trust rules, as a
//! throttle layer's, so a client cannot route itself onto another tenant's account.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::{BadKeySource, BrokenRule, KeySource};

/// `key` of a route: a key source like a layer's, named in its own errors.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct RouteKey(pub KeySource);

impl TryFrom<String> for RouteKey {
    type Error = BadKeySource;

    fn try_from(text: String) -> Result<RouteKey, BadKeySource> {
        KeySource::parse_for("route.key", &text).map(RouteKey)
    }
}

impl Default for RouteKey {
    fn default() -> RouteKey {
        RouteKey(KeySource::None)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Where the route's key comes from; `none` (the default) makes a route for every message.
    #[serde(default)]
    pub key: RouteKey,
    /// The route applies when the key is one of these (ASCII case ignored); left out, to any.
    pub values: Option<Vec<String>>,
    /// The upstream's `name`.
    pub upstream: Spanned<String>,
    /// Used when `upstream` cannot be reached (nothing of the message was sent to it).
    pub fallback: Option<Spanned<String>>,
    /// Header fields added to the message, after our `Received:`; `{key}` in a value is the
    /// route's key. A field of the same name from the client is replaced.
    #[serde(default)]
    pub add_headers: BTreeMap<String, String>,
    /// Remove the key header (a routing hint for this relay) before forwarding.
    #[serde(default = "yes")]
    pub strip_key_header: bool,
    /// The message's SES `TenantName` (`{key}` is the route's key, `{tenant}` the message's
    /// tenant of `[tenant]`), on routes to a `ses://` upstream only: SES keeps reputation and
    /// sending status per tenant.
    pub ses_tenant: Option<Spanned<String>>,
}

impl RouteConfig {
    /// A route that applies to every message (no `values`).
    pub fn catch_all(&self) -> bool {
        self.values.is_none()
    }

    /// Whether the route applies to a message whose route key is `key`.
    pub fn matches(&self, key: &str) -> bool {
        match &self.values {
            None => true,
            Some(values) => values.iter().any(|v| v.eq_ignore_ascii_case(key)),
        }
    }
}

fn yes() -> bool {
    true
}

/// The rules of the upstreams' names and of the routes that no single key's type can say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteRule {
    #[error("each of several [[upstream]] tables needs a name")]
    Nameless,
    #[error("duplicate upstream name")]
    DuplicateUpstream,
    #[error("at least one upstream is needed")]
    NoUpstream,
    #[error("no upstream named {0:?}")]
    UnknownUpstream(String),
    #[error("the fallback is the route's own upstream")]
    FallbackIsUpstream,
    /// The route's upstream, as its URL.
    #[error("only for routes to a ses:// upstream, not `{0}`")]
    SesTenantNotSes(String),
    #[error(
        "{0:?} is not an SES tenant name (letters, digits, _ and -, at most 64, `{{key}}` for \
         the route's key, `{{tenant}}` for the message's tenant)"
    )]
    NotSesTenantName(String),
    #[error("{0:?} is not a header field name")]
    NotFieldName(String),
    #[error("the value of {0:?} holds a control character")]
    ControlCharacter(String),
    #[error("the value of {0:?} is not ASCII")]
    NotAscii(String),
    #[error(
        "{name:?} would be up to {longest} octets with a key of {} bytes; a header line holds \
         at most {MAX_FIELD_LINE}",
        super::MAX_KEY_BYTES
    )]
    FieldTooLong { name: String, longest: usize },
}

/// The rules of the routes and of the upstream names that no single key's type can say.
pub(super) fn validate(config: &super::Config, text: &str) -> Result<(), BrokenRule> {
    let mut names = std::collections::HashSet::new();
    for (i, upstream) in config.upstreams.iter().enumerate() {
        let span = upstream.name.as_ref().map_or(0..0, Spanned::span);
        if config.upstreams.len() > 1 && upstream.name.is_none() {
            let span = table_span(text, i);
            return Err(BrokenRule::at(
                text,
                span,
                "upstream.name",
                RouteRule::Nameless,
            ));
        }
        if !names.insert(upstream.name()) {
            return Err(BrokenRule::at(
                text,
                span,
                "upstream.name",
                RouteRule::DuplicateUpstream,
            ));
        }
    }
    if config.upstreams.is_empty() {
        return Err(BrokenRule::unlocated("upstream", RouteRule::NoUpstream));
    }
    let known = |name: &Spanned<String>, key| match names.contains(name.get_ref().as_str()) {
        true => Ok(()),
        false => Err(BrokenRule::at(
            text,
            name.span(),
            key,
            RouteRule::UnknownUpstream(name.get_ref().clone()),
        )),
    };
    for route in &config.routes {
        known(&route.upstream, "route.upstream")?;
        if let Some(fallback) = &route.fallback {
            known(fallback, "route.fallback")?;
            if fallback.get_ref() == route.upstream.get_ref() {
                return Err(BrokenRule::at(
                    text,
                    fallback.span(),
                    "route.fallback",
                    RouteRule::FallbackIsUpstream,
                ));
            }
        }
        if let Some(tenant) = &route.ses_tenant {
            check_ses_tenant(config, route, tenant)
                .map_err(|e| BrokenRule::at(text, tenant.span(), "route.ses_tenant", e))?;
        }
        for (name, value) in &route.add_headers {
            check_added_header(name, value)
                .map_err(|e| BrokenRule::at(text, route.upstream.span(), "route.add_headers", e))?;
        }
    }
    for layer in &config.throttle {
        if let Some(upstream) = &layer.upstream {
            known(upstream, "throttle.upstream")?;
        }
    }
    Ok(())
}

/// `ses_tenant` names an SES tenant, so only a route to SES's API may carry one; the name,
/// once `{key}` and `{tenant}` are replaced, must be one SES takes.
fn check_ses_tenant(
    config: &super::Config,
    route: &RouteConfig,
    tenant: &Spanned<String>,
) -> Result<(), RouteRule> {
    let upstream = (config.upstreams.iter())
        .find(|u| u.name() == route.upstream.get_ref())
        .expect("checked above");
    if !matches!(upstream.kind, super::UpstreamKind::Ses(_)) {
        return Err(RouteRule::SesTenantNotSes(upstream.kind.to_string()));
    }
    let sample = (tenant.get_ref().replace("{key}", "k")).replace("{tenant}", "t");
    if !super::upstream::ses_name(&sample) {
        return Err(RouteRule::NotSesTenantName(tenant.get_ref().clone()));
    }
    Ok(())
}

/// Longest line of a header field, CRLF not counted (RFC 5322 2.1.1).
const MAX_FIELD_LINE: usize = 998;

/// An added field must be a field: a valid name, and a value that cannot start another one,
/// in plain ASCII (the next hop may not take 8-bit headers), on one line of at most 998
/// octets even with the longest key in each `{key}`.
fn check_added_header(name: &str, value: &str) -> Result<(), RouteRule> {
    let name_ok = !name.is_empty() && name.bytes().all(|b| (33..=126).contains(&b) && b != b':');
    if !name_ok {
        return Err(RouteRule::NotFieldName(name.to_string()));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(RouteRule::ControlCharacter(name.to_string()));
    }
    if !value.is_ascii() {
        return Err(RouteRule::NotAscii(name.to_string()));
    }
    let keys = value.matches("{key}").count();
    let longest = name.len() + 2 + value.len() + keys * (super::MAX_KEY_BYTES - "{key}".len());
    if longest > MAX_FIELD_LINE {
        return Err(RouteRule::FieldTooLong {
            name: name.to_string(),
            longest,
        });
    }
    Ok(())
}

/// Where the `i`th `[[upstream]]` table starts, to report a key it lacks.
fn table_span(text: &str, i: usize) -> std::ops::Range<usize> {
    let at = text
        .match_indices("[[upstream]]")
        .nth(i)
        .map_or(0, |(at, _)| at);
    at..at
}

/// What `mailsluice check` warns of: valid, but probably not what was meant.
pub(super) fn warnings(config: &super::Config) -> Vec<String> {
    let mut warnings = Vec::new();
    if !config.routes.is_empty() && !config.routes.iter().any(RouteConfig::catch_all) {
        warnings.push(
            "no [[route]] is a catch-all (without `values`): a message no route matches is \
             refused with 451 4.3.5"
                .to_string(),
        );
    }
    warnings
}
