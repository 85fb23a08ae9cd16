//! Whose message it is (`[tenant]`) and whose reputation it counts for, under the trust rules.

use super::*;

#[test]
fn reputation_key_follows_the_trust_rules_and_is_early_only_when_known() {
    let header = KeySource::parse("header:X-Tenant").unwrap();
    // A trusted client's header names its tenant, but only at the final dot.
    assert_eq!(reputation_key(&header, "d", &facts(MSG, &[], None)), "acme");
    assert_eq!(
        reputation_key_early(&header, "d", &facts(b"", &[], None)),
        None
    );
    // An authenticated client's header is not trusted: its AUTH tenant, known at MAIL.
    assert_eq!(
        reputation_key(&header, "d", &facts(MSG, &[], Some("t1"))),
        "t1"
    );
    let early = reputation_key_early(&header, "d", &facts(b"", &[], Some("t1")));
    assert_eq!(early.as_deref(), Some("t1"));
    let auth = KeySource::Auth;
    assert_eq!(
        reputation_key_early(&auth, "d", &facts(b"", &[], None)).as_deref(),
        Some("d")
    );
    let sender = KeySource::SenderDomain;
    let early = reputation_key_early(&sender, "d", &facts(b"", &[], None));
    assert_eq!(early.as_deref(), Some("example.com"));
    let rcpt = KeySource::RcptDomain;
    assert_eq!(
        reputation_key_early(&rcpt, "d", &facts(b"", &[], None)),
        None
    );
}

/// `[tenant]` names the message's tenant under the layers' trust rule; the guard's key is the
/// tenant's when `[reputation]` has none of its own.
#[test]
fn the_tenant_follows_the_trust_rules_and_is_the_guard_s_key_by_default() {
    let header = KeySource::parse("header:X-Tenant").unwrap();
    let tenant = KeyRule {
        source: &header,
        default_key: "d",
    };
    let rules = Rules {
        tenant,
        reputation_key: Some(tenant),
        ..rules(&[])
    };
    let trusted = identify(rules, &facts(MSG, &[], None));
    assert_eq!(trusted.tenant, "acme", "a trusted client's header");
    assert_eq!(trusted.reputation_key.as_deref(), Some("acme"));
    let authed = identify(rules, &facts(MSG, &[], Some("t1")));
    assert_eq!(
        authed.tenant, "t1",
        "an untrusted client's header is not read"
    );
    let nobody = identify(rules, &facts(b"Subject: x\r\n\r\n", &[], None));
    assert_eq!(nobody.tenant, "d");
    let ip = KeySource::ClientIp;
    let own = KeyRule {
        source: &ip,
        default_key: "d",
    };
    let rules = Rules {
        reputation_key: Some(own),
        ..rules
    };
    let both = identify(rules, &facts(MSG, &[], None));
    assert_eq!(
        (both.tenant.as_str(), both.reputation_key.as_deref()),
        ("acme", Some("127.0.0.1"))
    );
    let early = |facts| crate::policy::reputation_key_early(rules, facts);
    assert_eq!(early(&facts(b"", &[], None)).as_deref(), Some("127.0.0.1"));
}
