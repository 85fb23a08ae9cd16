//! The parser's own checks: defaults, and errors that name the key and the line.

use super::*;

/// A config of `[smtp]` and `[upstream]` alone (4 lines), to which a test adds its tables.
pub(super) const MINIMAL: &str =
    "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://out\"\n";

/// [`MINIMAL`] and `extra`, parsed.
pub(super) fn parse_with(extra: &str) -> Result<Config, InvalidConfig> {
    Config::parse(&format!("{MINIMAL}{extra}"))
}

#[test]
fn minimal_config_gets_defaults() {
    let c = Config::parse(MINIMAL).unwrap();
    assert_eq!(c.smtp.max_recipients.get(), 100);
    assert_eq!(c.smtp.trusted_networks.len(), 2);
    assert!(c.throttle.is_empty());
    assert!(c.smtp.proxy_from.is_empty());
    assert_eq!(c.smtp.proxy_timeout_ms.get(), 5000);
}

#[test]
fn proxy_from_reads_networks_as_trusted_networks_does() {
    let text = MINIMAL.replace(
        "listen",
        "proxy_from = [\"10.0.0.0/8\", \"fd00::/8\"]\nproxy_timeout_ms = 2000\nlisten",
    );
    let c = Config::parse(&text).unwrap();
    assert_eq!(c.smtp.proxy_from.len(), 2);
    assert!(c.smtp.proxy_from[0].contains(&"10.1.2.3".parse::<std::net::IpAddr>().unwrap()));
    assert_eq!(c.smtp.proxy_timeout_ms.get(), 2000);
    let bad = MINIMAL.replace("listen", "proxy_from = [\"10.0.0.0/33\"]\nlisten");
    let err = Config::parse(&bad).unwrap_err().to_string();
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let err = Config::parse(&format!("{MINIMAL}bogus = 1\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("bogus"), "{err}");
    assert!(err.contains("line 5"), "{err}");
}

#[test]
fn zero_limit_is_refused_with_its_line() {
    let text = format!("{MINIMAL}[[throttle]]\nname = \"t\"\nkey = \"none\"\nlimit = 0\n");
    let err = Config::parse(&text).unwrap_err().to_string();
    assert!(err.contains("line 8"), "{err}");
}

#[test]
fn bad_key_source_is_refused_with_its_line() {
    let text = format!("{MINIMAL}[[throttle]]\nname = \"t\"\nkey = \"moon\"\nlimit = 1\n");
    let err = Config::parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("throttle.key") && err.contains("line 7"),
        "{err}"
    );
}

fn layer_error(body: &str) -> String {
    let text = format!("{MINIMAL}[[throttle]]\nname = \"t\"\nkey = \"none\"\n{body}\n");
    Config::parse(&text).unwrap_err().to_string()
}

#[test]
fn impossible_layer_values_are_refused_with_key_and_line() {
    for (body, key, line) in [
        ("limit = 1\nburst = 0", "burst", 9),
        ("limit = 1\nrefill = \"sometimes\"", "sometimes", 9),
        ("limit = 1\nmode = \"maybe\"", "maybe", 9),
        ("limit = 1\ninterval_ms = 0", "interval_ms", 9),
        ("limit = 1\ncost = \"bytes\"", "bytes", 9),
        ("limit = 1\nmatch = { header = \"X-Tier\" }", "value", 9),
        (
            "limit = 1\nmatch = { header = \"\", value = \"a\" }",
            "throttle.match",
            9,
        ),
        ("limit = 1\nfrobnicate = true", "frobnicate", 9),
        ("limit = 1\nfair_by = \"moon\"", "throttle.fair_by", 9),
        (
            "limit = 1\nfair_by = \"auth\"\nweights = { a = 0 }",
            "weights",
            10,
        ),
        ("limit = 1\nweights = { a = 2 }", "throttle.weights", 6),
    ] {
        let err = layer_error(body);
        assert!(err.contains(key), "{body}: {err}");
        assert!(err.contains(&format!("line {line}")), "{body}: {err}");
    }
}

#[test]
fn every_layer_key_of_the_design_is_accepted() {
    let text = format!(
        "{MINIMAL}[[throttle]]\nname = \"t\"\nkey = \"header:X-Tenant\"\ndefault_key = \"d\"\n\
         cost = \"message\"\nlimit = 3\ninterval_ms = 500\nburst = 6\nmode = \"reject\"\n\
         max_wait_ms = 100\nmax_queue = 7\nmax_keys = 8\nrefill = \"drip\"\nidle_ttl_ms = 9\n\
         match = {{ header = \"X-Tier\", value = \"basic\" }}\nstore = \"local\"\n\
         charge_failures = true\nstrip_key_header = false\n"
    );
    let c = Config::parse(&text).unwrap();
    let layer = &c.throttle[0];
    assert_eq!(layer.key, KeySource::Header("X-Tenant".into()));
    assert_eq!(
        (
            layer.limit.get(),
            layer.burst(),
            layer.max_queue.get(),
            layer.max_keys.get()
        ),
        (3, 6, 7, 8)
    );
    assert!(layer.charge_failures && !layer.strip_key_header);
}

#[test]
fn bad_upstream_url_is_refused() {
    let err =
        Config::parse("[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"gopher://x\"\n")
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("upstream.url") && err.contains("line 4"),
        "{err}"
    );
}

#[test]
fn bad_reply_pattern_names_key_and_line() {
    let text = format!("{MINIMAL}throttle_replies = [\"^454 (\"]\n");
    let err = Config::parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("throttle_replies") && err.contains("line 5"),
        "{err}"
    );
}

#[test]
fn fair_by_and_weights_are_read() {
    let text = format!(
        "{MINIMAL}[[throttle]]\nname = \"t\"\nkey = \"none\"\nlimit = 5\n\
         fair_by = \"header:X-Tenant\"\nweights = {{ acme = 3 }}\n"
    );
    let config = Config::parse(&text).unwrap();
    let layer = &config.throttle[0];
    let by = layer.fair_by.as_ref().map(|f| &f.0);
    assert_eq!(by, Some(&KeySource::Header("X-Tenant".into())));
    assert_eq!(layer.weights["acme"].get(), 3);
}

const TWO: &str = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n\
    [[upstream]]\nname = \"eu\"\nurl = \"smtp://eu.example:587\"\n\
    [[upstream]]\nname = \"backup\"\nurl = \"smtp://backup.example:25\"\n";

#[test]
fn one_upstream_table_is_named_default_and_several_keep_their_names() {
    let one = Config::parse(MINIMAL).unwrap();
    assert_eq!(one.upstreams.len(), 1);
    assert_eq!(one.upstreams[0].name(), DEFAULT_NAME);
    let two = Config::parse(TWO).unwrap();
    let names: Vec<&str> = two.upstreams.iter().map(UpstreamConfig::name).collect();
    assert_eq!(names, ["eu", "backup"]);
    assert!(two.warnings().is_empty(), "no routes, no warning");
}

fn route_error(rest: &str) -> String {
    Config::parse(&format!("{TWO}{rest}"))
        .unwrap_err()
        .to_string()
}

#[test]
fn route_and_upstream_names_are_checked_with_their_lines() {
    let unknown = route_error("[[route]]\nupstream = \"us\"\n");
    assert!(
        unknown.contains("route.upstream") && unknown.contains("\"us\""),
        "{unknown}"
    );
    assert!(unknown.contains("line 10"), "{unknown}");
    let fallback = route_error("[[route]]\nupstream = \"eu\"\nfallback = \"eu\"\n");
    assert!(
        fallback.contains("route.fallback") && fallback.contains("line 11"),
        "{fallback}"
    );
    let missing = route_error("[[route]]\nupstream = \"eu\"\nfallback = \"nope\"\n");
    assert!(missing.contains("no upstream named \"nope\""), "{missing}");
    let layer =
        route_error("[[throttle]]\nname = \"t\"\nkey = \"none\"\nlimit = 1\nupstream = \"x\"\n");
    assert!(
        layer.contains("throttle.upstream") && layer.contains("line 13"),
        "{layer}"
    );
    let dup = Config::parse(&format!(
        "{TWO}[[upstream]]\nname = \"eu\"\nurl = \"file://o\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        dup.contains("duplicate upstream name") && dup.contains("line 10"),
        "{dup}"
    );
    let nameless = Config::parse(&format!("{TWO}[[upstream]]\nurl = \"file://o\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        nameless.contains("needs a name") && nameless.contains("line 9"),
        "{nameless}"
    );
    let key = route_error("[[route]]\nkey = \"moon\"\nupstream = \"eu\"\n");
    assert!(key.contains("route.key"), "{key}");
}

#[test]
fn added_headers_must_be_fields() {
    let bad_name =
        route_error("[[route]]\nupstream = \"eu\"\nadd_headers = { \"X Bad\" = \"v\" }\n");
    assert!(bad_name.contains("not a header field name"), "{bad_name}");
    let bad_value = route_error(
        "[[route]]\nupstream = \"eu\"\nadd_headers = { \"X-Ok\" = \"a\\r\\nBcc: x\" }\n",
    );
    assert!(bad_value.contains("control character"), "{bad_value}");
}

#[test]
fn routes_without_a_catch_all_are_warned_of() {
    let routed = "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"acme\"]\nupstream = \"eu\"\n";
    let c = Config::parse(&format!("{TWO}{routed}")).unwrap();
    assert_eq!(c.warnings().len(), 1);
    assert!(c.warnings()[0].contains("451 4.3.5"));
    let c = Config::parse(&format!("{TWO}{routed}[[route]]\nupstream = \"backup\"\n")).unwrap();
    assert!(c.warnings().is_empty());
}

#[test]
fn ses_tenant_is_only_for_routes_to_ses_and_names_its_line() {
    let ses = format!("{TWO}[[upstream]]\nname = \"ses\"\nurl = \"ses://eu-west-1\"\n");
    let ok = Config::parse(&format!(
        "{ses}[[route]]\nkey = \"header:X-Tenant\"\nupstream = \"ses\"\nses_tenant = \"t-{{key}}\"\n"
    ))
    .unwrap();
    assert_eq!(
        ok.routes[0].ses_tenant.as_ref().unwrap().get_ref(),
        "t-{key}"
    );
    // Line 14: the route's `ses_tenant` on a route to an SMTP upstream.
    let smtp = Config::parse(&format!(
        "{ses}[[route]]\nkey = \"header:X-Tenant\"\nupstream = \"eu\"\nses_tenant = \"{{key}}\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        smtp.contains("route.ses_tenant") && smtp.contains("smtp://eu.example:587"),
        "{smtp}"
    );
    assert!(smtp.contains("line 15"), "{smtp}");
    let bad = Config::parse(&format!(
        "{ses}[[route]]\nupstream = \"ses\"\nses_tenant = \"a b\"\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        bad.contains("route.ses_tenant") && bad.contains("line 14"),
        "{bad}"
    );
}

#[test]
fn ses_tenant_may_name_the_message_s_tenant_under_the_same_name_rules() {
    let ses = format!("{TWO}[[upstream]]\nname = \"ses\"\nurl = \"ses://eu-west-1\"\n");
    let ok = Config::parse(&format!(
        "{ses}[[route]]\nupstream = \"ses\"\nses_tenant = \"t-{{tenant}}-{{key}}\"\n"
    ))
    .unwrap();
    let written = ok.routes[0].ses_tenant.as_ref().unwrap();
    assert_eq!(written.get_ref(), "t-{tenant}-{key}");
    let too_long = format!("{{tenant}}{}", "x".repeat(64));
    for bad in ["{tenant}.x", "{tenants}", &too_long] {
        let err = Config::parse(&format!(
            "{ses}[[route]]\nupstream = \"ses\"\nses_tenant = \"{bad}\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("route.ses_tenant") && err.contains("line 14"),
            "{bad}: {err}"
        );
    }
}

const SES_AND_SMTP: &str = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n\
    [[upstream]]\nname = \"ses\"\nurl = \"ses://eu-west-1\"\n\
    [[upstream]]\nname = \"eu\"\nurl = \"smtp://eu.example:587\"\n";

fn account_layer(body: &str) -> Result<Config, InvalidConfig> {
    Config::parse(&format!(
        "{SES_AND_SMTP}[[throttle]]\nname = \"account\"\nlimit = \"account\"\n{body}\n"
    ))
}

#[test]
fn limit_account_is_for_a_key_none_layer_scoped_to_a_ses_upstream_only() {
    let ok = account_layer("key = \"none\"\nupstream = \"ses\"\n").unwrap();
    assert_eq!(ok.throttle[0].limit, Limit::Account);
    assert_eq!(
        ok.throttle[0].adaptive_floor(),
        None,
        "not learned by default"
    );
    for body in [
        "key = \"header:X-Tenant\"\nupstream = \"ses\"\n",
        "key = \"none\"\nupstream = \"eu\"\n",
        "key = \"none\"\n",
        "key = \"none\"\nupstream = \"ses\"\nadaptive = true\n",
        "key = \"none\"\nupstream = \"ses\"\nstore = \"redis\"\n",
        "key = \"none\"\nupstream = \"ses\"\nrefill = \"fixed_window\"\n",
    ] {
        let err = account_layer(body).unwrap_err().to_string();
        assert!(
            err.contains("throttle.limit") && err.contains("line 10"),
            "{body}: {err}"
        );
    }
    let text = format!("{MINIMAL}[[throttle]]\nname = \"t\"\nkey = \"none\"\nlimit = \"fast\"\n");
    let err = Config::parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("\"account\"") && err.contains("line 8"),
        "{err}"
    );
}

#[test]
fn telemetry_takes_an_http_endpoint_and_refuses_others_with_the_key_and_line() {
    let ok = format!("{MINIMAL}[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/\"\n");
    let telemetry = Config::parse(&ok).unwrap().telemetry.expect("on");
    assert_eq!(telemetry.otlp_endpoint, "http://127.0.0.1:4318");
    assert_eq!(telemetry.service_name, "mailsluice");
    assert!(!telemetry.record_keys);
    assert!(Config::parse(MINIMAL).unwrap().telemetry.is_none());
    for bad in ["https://collector:4318", "collector:4318", "http://"] {
        let text = format!("{MINIMAL}[telemetry]\notlp_endpoint = \"{bad}\"\n");
        let err = Config::parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("telemetry.otlp_endpoint") && err.contains("line 6"),
            "{err}"
        );
    }
}

#[test]
fn admin_password_hash_comes_from_its_environment_variable() {
    let hash = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$hRh5UbO5V5zAcTz1r34tZgRfrqBvAdiE/lw+J3iU+Ls";
    let var = "MAILSLUICE_TEST_ADMIN_HASH_FROM_ENV";
    let text = format!("{MINIMAL}[admin]\npassword_hash_env = \"{var}\"\n");
    let err = Config::parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("admin.password_hash_env") && err.contains(var) && err.contains("line 6"),
        "{err}"
    );
    std::env::set_var(var, format!("{hash}\n"));
    let c = Config::parse(&text).unwrap();
    let got = c.admin.unwrap().password_hash.unwrap().into_inner();
    assert_eq!(got, hash, "read, its line end trimmed");
    let both =
        format!("{MINIMAL}[admin]\npassword_hash_env = \"{var}\"\npassword_hash = \"{hash}\"\n");
    let err = Config::parse(&both).unwrap_err().to_string();
    assert!(err.contains("not both"), "{err}");
    std::env::set_var(var, "secret");
    let err = Config::parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("admin.password_hash") && err.contains("line 6"),
        "{err}"
    );
    std::env::remove_var(var);
}
