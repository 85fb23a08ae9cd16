//! The key and cost rules, and the header trust rule, on hand-made messages.

use super::*;
use crate::config::MAX_KEY_BYTES;

fn layer(key: &str, cost: Cost, matches: Option<(&str, &str)>) -> LayerPolicy {
    LayerPolicy {
        name: "l".into(),
        key: KeySource::parse(key).unwrap(),
        default_key: "default".into(),
        cost,
        matches: matches.map(|(h, v)| MatchSpec {
            header: h.into(),
            value: v.into(),
        }),
        strip_key_header: true,
        fair_by: None,
        upstream: None,
    }
}

/// `[tenant]` left out: the AUTH user's tenant.
static AUTH: KeySource = KeySource::Auth;

fn tenant_rule() -> KeyRule<'static> {
    KeyRule {
        source: &AUTH,
        default_key: "default",
    }
}

fn rules(layers: &[LayerPolicy]) -> Rules<'_> {
    Rules {
        layers,
        routes: &[],
        first_upstream: "default",
        tenant: tenant_rule(),
        reputation_key: None,
        instance: "0123abcd",
    }
}

/// The charges of a message without routes, in layer order.
fn charges(layers: &[LayerPolicy], facts: &MessageFacts<'_>) -> Vec<Charge> {
    identify(rules(layers), facts).charges
}

/// The message without the key headers of the layers that strip theirs.
fn strip_key_headers(layers: &[LayerPolicy], message: Vec<u8>) -> Vec<u8> {
    let identity = identify(rules(layers), &facts(&message, &[], None));
    identity.forwarded(&message).collect::<Vec<_>>().concat()
}

/// The reputation guard's tenant of a message, read with `source` and `default_key`.
fn reputation_key(source: &KeySource, default_key: &str, facts: &MessageFacts<'_>) -> String {
    let rule = KeyRule {
        source,
        default_key,
    };
    let rules = Rules {
        reputation_key: Some(rule),
        ..rules(&[])
    };
    identify(rules, facts)
        .reputation_key
        .expect("the guard's key is read")
}

/// The same, as far as it is known at MAIL.
fn reputation_key_early(
    source: &KeySource,
    default_key: &str,
    facts: &MessageFacts<'_>,
) -> Option<String> {
    let rule = KeyRule {
        source,
        default_key,
    };
    let rules = Rules {
        reputation_key: Some(rule),
        ..rules(&[])
    };
    super::reputation_key_early(rules, facts)
}

fn facts<'a>(message: &'a [u8], rcpts: &'a [String], tenant: Option<&'a str>) -> MessageFacts<'a> {
    MessageFacts {
        auth_tenant: tenant,
        // As the session sets it for a trusted network without AUTH, or a user without
        // `trust_key_header`.
        header_trusted: tenant.is_none(),
        sender: Some("App@Example.COM"),
        rcpts,
        client_ip: "127.0.0.1".parse().unwrap(),
        message,
        binding: None,
    }
}

const MSG: &[u8] = b"Subject: hi\r\nX-Tenant:\r\n  acme\r\nX-Tier: Basic\r\n\r\nX-Tenant: body\r\n";

#[test]
fn header_key_is_unfolded_and_case_insensitive() {
    let rcpts = vec!["a@B.example".to_string(), "c@d".to_string()];
    let layers = [layer("header:x-tenant", Cost::Recipients, None)];
    let c = charges(&layers, &facts(MSG, &rcpts, None));
    assert_eq!(
        c,
        [Charge {
            layer: 0,
            key: "acme".into(),
            cost: 2,
            fair: String::new(),
            blame: "acme".into(),
        }]
    );
}

/// Every charge of a message names its tenant: the key of its first layer keyed by neither
/// `none` nor `rcpt-domain`, whatever the order of the layers.
#[test]
fn a_message_s_tenant_is_its_first_tenant_keyed_layers_key() {
    let rcpts = vec!["a@B.example".to_string(), "c@d".to_string()];
    let layers = [
        layer("none", Cost::Message, None),
        layer("rcpt-domain", Cost::Recipients, None),
        layer("header:x-tenant", Cost::Recipients, None),
        layer("sender", Cost::Message, None),
    ];
    let c = charges(&layers, &facts(MSG, &rcpts, None));
    assert_eq!(c.len(), 5, "{c:?}");
    assert!(c.iter().all(|c| c.blame == "acme"), "{c:?}");
    let account_only = [layer("none", Cost::Message, None)];
    let c = charges(&account_only, &facts(MSG, &rcpts, None));
    assert_eq!(c[0].blame, "", "no tenant to tell apart");
}

#[test]
fn missing_source_falls_back_to_default_key() {
    let rcpts = vec!["a@b".to_string()];
    let layers = [
        layer("header:X-Other", Cost::Message, None),
        layer("auth", Cost::Message, None),
    ];
    let c = charges(&layers, &facts(MSG, &rcpts, None));
    assert_eq!(c[0].key, "default");
    assert_eq!(c[1].key, "default");
}

#[test]
fn authenticated_tenant_wins_over_the_header() {
    let rcpts = vec!["a@b".to_string()];
    let layers = [layer("header:X-Tenant", Cost::Message, None)];
    let c = charges(&layers, &facts(MSG, &rcpts, Some("paying-tenant")));
    assert_eq!(c[0].key, "paying-tenant");
}

#[test]
fn envelope_keys_are_lowercased() {
    let rcpts = vec!["a@B.example".to_string()];
    let layers = [
        layer("sender", Cost::Message, None),
        layer("sender-domain", Cost::Message, None),
        layer("rcpt-domain", Cost::Message, None),
        layer("client-ip", Cost::Message, None),
    ];
    let keys: Vec<String> = charges(&layers, &facts(MSG, &rcpts, None))
        .into_iter()
        .map(|c| c.key)
        .collect();
    assert_eq!(
        keys,
        ["app@example.com", "example.com", "b.example", "127.0.0.1"]
    );
}

#[test]
fn match_selects_tier_layers_only() {
    let rcpts = vec!["a@b".to_string()];
    let layers = [
        layer("none", Cost::Message, Some(("X-Tier", "basic"))),
        layer("none", Cost::Message, Some(("X-Tier", "cx"))),
    ];
    let c = charges(&layers, &facts(MSG, &rcpts, None));
    assert_eq!(c.iter().map(|c| c.layer).collect::<Vec<_>>(), [0]);
}

#[test]
fn key_header_is_stripped_with_its_continuation_and_body_untouched() {
    let layers = [layer("header:X-Tenant", Cost::Message, None)];
    let out = strip_key_headers(&layers, MSG.to_vec());
    assert_eq!(
        out,
        b"Subject: hi\r\nX-Tier: Basic\r\n\r\nX-Tenant: body\r\n"
    );
}

#[test]
fn hostile_long_header_key_is_truncated() {
    let msg = format!("X-Tenant: {}\r\n\r\n", "é".repeat(500));
    let rcpts = vec!["a@b".to_string()];
    let layers = [layer("header:X-Tenant", Cost::Message, None)];
    let c = charges(&layers, &facts(msg.as_bytes(), &rcpts, None));
    assert!(c[0].key.len() <= MAX_KEY_BYTES);
}

#[test]
fn header_from_an_untrusted_client_is_ignored() {
    let rcpts = vec!["a@b".to_string()];
    let layers = [layer("header:X-Tenant", Cost::Message, None)];
    let mut f = facts(MSG, &rcpts, None);
    f.header_trusted = false;
    assert_eq!(charges(&layers, &f)[0].key, "default");
}

#[test]
fn user_trusted_with_key_headers_may_set_one_and_falls_back_to_its_tenant() {
    let rcpts = vec!["a@b".to_string()];
    let layers = [
        layer("header:X-Tenant", Cost::Message, None),
        layer("header:X-Other", Cost::Message, None),
        layer("auth", Cost::Message, None),
    ];
    let mut f = facts(MSG, &rcpts, Some("platform"));
    f.header_trusted = true;
    let keys: Vec<String> = charges(&layers, &f).into_iter().map(|c| c.key).collect();
    assert_eq!(keys, ["acme", "platform", "platform"]);
}

#[test]
fn empty_trusted_header_falls_back() {
    let rcpts = vec!["a@b".to_string()];
    let layers = [layer("header:X-Tenant", Cost::Message, None)];
    let msg = b"X-Tenant:   \r\n\r\n";
    assert_eq!(
        charges(&layers, &facts(msg, &rcpts, None))[0].key,
        "default"
    );
    let mut f = facts(msg, &rcpts, Some("t"));
    f.header_trusted = true;
    assert_eq!(charges(&layers, &f)[0].key, "t");
}

#[test]
fn fair_key_follows_the_key_rules_and_its_header_is_stripped() {
    let rcpts = vec!["a@b".to_string()];
    let mut account = layer("none", Cost::Recipients, None);
    account.fair_by = Some(KeySource::parse("header:X-Tenant").unwrap());
    let layers = [account];
    let trusted = identify(rules(&layers), &facts(MSG, &rcpts, None));
    assert_eq!(
        (
            trusted.charges[0].key.as_str(),
            trusted.charges[0].fair.as_str()
        ),
        ("", "acme")
    );
    assert_eq!(trusted.key_headers.len(), 1, "X-Tenant is a routing hint");
    // An authenticated client without header trust stays its tenant's fair key.
    let authed = identify(rules(&layers), &facts(MSG, &rcpts, Some("globex")));
    assert_eq!(authed.charges[0].fair, "globex");
    // No fair_by: no fair key.
    let plain = [layer("none", Cost::Recipients, None)];
    assert_eq!(
        identify(rules(&plain), &facts(MSG, &rcpts, None)).charges[0].fair,
        ""
    );
}

#[test]
fn a_rcpt_domain_layer_charges_each_domain_its_own_recipients() {
    let rcpts: Vec<String> = ["a@X.example", "b@y.example", "c@x.example"]
        .map(String::from)
        .to_vec();
    let layers = [
        layer("rcpt-domain", Cost::Recipients, None),
        layer("rcpt-domain", Cost::Message, None),
    ];
    let got: Vec<(usize, String, u64)> = charges(&layers, &facts(MSG, &rcpts, None))
        .into_iter()
        .map(|c| (c.layer, c.key, c.cost))
        .collect();
    let want = [
        (0, "x.example", 2),
        (0, "y.example", 1),
        (1, "x.example", 1),
        (1, "y.example", 1),
    ]
    .map(|(l, k, c)| (l, k.to_string(), c));
    assert_eq!(got, want);
}

/// The `traceparent` field is read with the rest: the first of the header section, trimmed;
/// one in the body is not a field.
#[test]
fn the_traceparent_is_read_from_the_header_section() {
    let traceparent = |message: &[u8]| identify(rules(&[]), &facts(message, &[], None)).traceparent;
    let message = b"Subject: x\r\nTraceParent: 00-ab-cd-01 \r\n\r\ntraceparent: body\r\n";
    assert_eq!(traceparent(message).as_deref(), Some("00-ab-cd-01"));
    assert_eq!(
        traceparent(b"Subject: x\r\n\r\ntraceparent: no\r\n").as_deref(),
        None
    );
}

mod route;
mod tenant;
