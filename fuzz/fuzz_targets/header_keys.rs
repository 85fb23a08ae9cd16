//! A message's identity (`policy::identify`: header keys, key-header stripping, hops,
//! `traceparent`) on arbitrary message bytes: no panic, keys bounded, stripping only ever
//! removes bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mailsluice::config::KeySource;
use mailsluice::policy::{self, KeyRule, LayerPolicy, MessageFacts, Rules};

fuzz_target!(|input: &[u8]| {
    let Some((&flags, message)) = input.split_first() else {
        return;
    };
    let layers = layers();
    let rcpts = vec!["r@example.com".to_string()];
    let facts = MessageFacts {
        auth_tenant: (flags & 1 != 0).then_some("tenant"),
        header_trusted: flags & 2 != 0,
        sender: (flags & 4 != 0).then_some("s@Example.com"),
        rcpts: &rcpts,
        client_ip: "192.0.2.1".parse().unwrap(),
        message,
        binding: None,
    };
    let tenant_source = KeySource::Header("X-Tenant".into());
    let tenant = KeyRule {
        source: &tenant_source,
        default_key: "default",
    };
    let rules = Rules {
        layers,
        routes: &[],
        first_upstream: "default",
        tenant,
        reputation_key: Some(tenant),
        instance: "0123abcd",
    };
    let identity = policy::identify(rules, &facts);
    for charge in &identity.charges {
        assert!(charge.key.len() <= 128, "key of {} bytes", charge.key.len());
    }
    assert!(identity.tenant.len() <= 128, "tenant of {} bytes", identity.tenant.len());
    let stripped: usize = identity.forwarded(message).map(<[u8]>::len).sum();
    assert!(stripped <= message.len());
});

/// A header-keyed layer, an `auth` layer matched on a tier header, and an envelope-keyed one;
/// parsed once, not per input.
fn layers() -> &'static [LayerPolicy] {
    static LAYERS: std::sync::OnceLock<Vec<LayerPolicy>> = std::sync::OnceLock::new();
    LAYERS.get_or_init(|| {
        let config = mailsluice::config::Config::parse(
            "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://x\"\n\
             [[throttle]]\nname = \"a\"\nkey = \"header:X-Tenant\"\nlimit = 1\n\
             [[throttle]]\nname = \"b\"\nkey = \"auth\"\nlimit = 1\n\
             match = { header = \"X-Tier\", value = \"basic\" }\n\
             [[throttle]]\nname = \"c\"\nkey = \"sender-domain\"\nlimit = 1\ncost = \"message\"\n",
        )
        .expect("valid config");
        config.throttle.iter().map(LayerPolicy::from_config).collect()
    })
}
