//! The route a message takes: the layers it scopes, the fields it adds, its SES tenant.

use super::*;

fn routes(text: &str) -> Vec<RouteConfig> {
    let config = format!(
        "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[[upstream]]\nname = \"a\"\nurl = \"file://a\"\n\
         [[upstream]]\nname = \"b\"\nurl = \"file://b\"\n{text}"
    );
    crate::config::Config::parse(&config).unwrap().routes
}

#[test]
fn the_route_scopes_the_layers_and_the_header_it_adds_replaces_the_clients() {
    let routes = routes(
        "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"ACME\"]\nupstream = \"a\"\n\
         fallback = \"b\"\nadd_headers = { \"Subject\" = \"[{key}]\" }\n\
         [[route]]\nupstream = \"b\"\n",
    );
    let mut on_a = layer("none", Cost::Message, None);
    on_a.upstream = Some("a".into());
    let mut on_b = layer("none", Cost::Message, None);
    on_b.upstream = Some("b".into());
    let layers = [layer("header:X-Tier", Cost::Message, None), on_a, on_b];
    let rules = Rules {
        layers: &layers,
        routes: &routes,
        first_upstream: "a",
        tenant: tenant_rule(),
        reputation_key: None,
        instance: "0123abcd",
    };
    let rcpts = vec!["r@example.net".to_string()];
    let plan = identify(rules, &facts(MSG, &rcpts, None));
    let route = plan.route.clone().unwrap();
    assert_eq!(
        (route.upstream.as_str(), route.fallback.as_deref()),
        ("a", Some("b"))
    );
    assert_eq!(
        route.headers,
        [("Subject".to_string(), "[acme]".to_string())]
    );
    let layers_of = |c: &[Charge]| c.iter().map(|c| c.layer).collect::<Vec<_>>();
    assert_eq!(layers_of(&plan.charges), [0, 1]);
    assert_eq!(layers_of(&plan.fallback_charges), [2]);
    let forwarded: Vec<u8> = plan.forwarded(MSG).collect::<Vec<_>>().concat();
    assert_eq!(
        forwarded, b"\r\nX-Tenant: body\r\n",
        "the client's Subject (replaced), the route's and the layer's key headers are out, the \
         body untouched"
    );
    let other = b"X-Tenant: initech\r\n\r\n";
    let plan = identify(rules, &facts(other, &rcpts, None));
    assert_eq!(plan.route.unwrap().upstream, "b");
    assert_eq!(layers_of(&plan.charges), [0, 2]);
}

/// `{tenant}` in `ses_tenant` is the message's tenant; a name SES does not take as it is
/// (outside its alphabet, past 64 characters) is no upstream tenant but an unfit one, never
/// reduced into another's; at MAIL it is left unknown while the tenant is.
#[test]
fn ses_tenant_renders_the_message_s_tenant() {
    let config = crate::config::Config::parse(
        "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nname = \"ses\"\n\
         url = \"ses://eu-west-1\"\n[[route]]\nupstream = \"ses\"\n\
         ses_tenant = \"t-{tenant}\"\n",
    )
    .unwrap();
    let header = KeySource::parse("header:X-Tenant").unwrap();
    let rules = Rules {
        routes: &config.routes,
        first_upstream: "ses",
        tenant: KeyRule {
            source: &header,
            default_key: "d",
        },
        ..rules(&[])
    };
    let upstream_tenant = |message: &[u8], tenant| {
        let identity = identify(rules, &facts(message, &[], tenant));
        identity.route.unwrap().upstream_tenant
    };
    let unfit = |message: &[u8], tenant| {
        let identity = identify(rules, &facts(message, &[], tenant));
        identity.route.unwrap().unfit_tenant
    };
    assert_eq!(upstream_tenant(MSG, None).as_deref(), Some("t-acme"));
    assert_eq!(unfit(MSG, None), None);
    for tenant in ["a.b", "a/b"] {
        assert_eq!(upstream_tenant(MSG, Some(tenant)), None, "{tenant}");
        assert_eq!(unfit(MSG, Some(tenant)), Some(format!("t-{tenant}")));
    }
    let long = "x".repeat(63);
    assert_eq!(
        upstream_tenant(MSG, Some(&long[..62])),
        Some(format!("t-{}", &long[..62]))
    );
    assert_eq!(unfit(MSG, Some(&long)).map(|n| n.len()), Some(65));
    assert_eq!(
        unfit(MSG, Some("a\r\nb")).as_deref(),
        Some("t-a__b"),
        "printable"
    );
    let early = |tenant| route_early(rules, &facts(b"", &[], tenant)).unwrap();
    assert_eq!(
        early(None).upstream_tenant,
        None,
        "a header: known at the dot"
    );
    assert_eq!(early(Some("t1")).upstream_tenant.as_deref(), Some("t-t1"));
}
