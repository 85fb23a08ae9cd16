//! `[[webhook]]` at load: its defaults, and each rule's error naming the key and its line.

use crate::config::{Config, EventType};

const BASE: &str = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://out\"\n\
                    [reputation]\nkey = \"header:X-Tenant\"\n";
const VAR: &str = "MAILSLUICE_TEST_CONFIG_WEBHOOK_SECRET";

/// `BASE` and one webhook of `body`, its secret's variable set.
fn parse(body: &str) -> Result<Config, String> {
    std::env::set_var(VAR, "s3cret");
    let text = format!("{BASE}[[webhook]]\n{body}\n");
    Config::parse(&text).map_err(|e| e.to_string())
}

fn hook(url: &str, extra: &str) -> String {
    format!("tenant = \"acme\"\nurl = \"{url}\"\nsecret_env = \"{VAR}\"\n{extra}")
}

#[test]
fn a_webhook_gets_its_defaults_and_its_secret() {
    let config = parse(&hook("https://hooks.example.com/in", "")).unwrap();
    let w = &config.webhooks[0];
    assert_eq!(w.name, "webhook1");
    assert_eq!(*w.events.get_ref(), EventType::ALL.to_vec());
    assert_eq!(w.secret.0, "s3cret");
    assert_eq!(w.max_queue.get(), 10_000);
    assert_eq!(w.max_queue_bytes.get(), 16 << 20);
    assert_eq!((w.retry_window_ms.get(), w.max_attempts), (3_600_000, None));
    let url = w.target().unwrap();
    assert_eq!(
        (url.https, url.host.as_str(), url.port),
        (true, "hooks.example.com", 443)
    );
    assert_eq!(url.path, "/in");
    assert_eq!(format!("{:?}", w.secret), "Secret(..)");
}

/// `[tenant]` names whose message it is: a webhook needs no reputation guard.
#[test]
fn webhooks_need_no_reputation_guard() {
    std::env::set_var(VAR, "s3cret");
    let text = BASE.replace("[reputation]\nkey = \"header:X-Tenant\"\n", "");
    let text = format!(
        "{text}[tenant]\nkey = \"header:X-Tenant\"\n[[webhook]]\n{}",
        hook("https://h.example.com/", "")
    );
    let config = Config::parse(&text).unwrap();
    assert!(config.reputation.is_none());
    assert_eq!(config.webhooks[0].tenant.get_ref(), "acme");
}

#[test]
fn an_internal_address_is_refused_unless_allowed() {
    for url in [
        "https://127.0.0.1:8443/hook",
        "https://10.0.0.5/hook",
        "https://169.254.169.254/latest",
        "https://[::1]/hook",
        "https://localhost/hook",
        "https://[::ffff:192.168.1.1]/hook",
    ] {
        let err = parse(&hook(url, "")).unwrap_err();
        assert!(
            err.contains("key `webhook.url`") && err.contains("internal address"),
            "{url}: {err}"
        );
        assert!(err.contains("line 9"), "{err}");
    }
    let allowed = "allow_networks = [\"127.0.0.0/8\", \"::1/128\"]";
    parse(&hook("https://127.0.0.1:8443/hook", allowed)).unwrap();
    parse(&hook("https://localhost:8443/hook", allowed)).unwrap();
    let err = parse(&hook("https://10.0.0.5/hook", allowed)).unwrap_err();
    assert!(err.contains("internal address"), "{err}");
}

#[test]
fn plain_http_only_within_allowed_networks() {
    let err = parse(&hook("http://hooks.example.com/in", "")).unwrap_err();
    assert!(
        err.contains("webhook.url") && err.contains("plain http"),
        "{err}"
    );
    let err = parse(&hook(
        "http://8.8.8.8/in",
        "allow_networks = [\"10.0.0.0/8\"]",
    ));
    assert!(err.unwrap_err().contains("plain http"));
    parse(&hook(
        "http://10.1.2.3:8080/in",
        "allow_networks = [\"10.0.0.0/8\"]",
    ))
    .unwrap();
}

#[test]
fn a_bad_url_tenant_secret_or_event_is_named() {
    let err = parse(&hook("ftp://hooks.example.com/", "")).unwrap_err();
    assert!(
        err.contains("webhook.url") && err.contains("no http(s) URL"),
        "{err}"
    );
    let err = parse(&hook("https://user:pw@hooks.example.com/", "")).unwrap_err();
    assert!(err.contains("webhook.url"), "{err}");
    let err = parse(&hook("https://h.example.com/", "").replace(VAR, "MAILSLUICE_UNSET_VAR_X"));
    let err = err.unwrap_err();
    assert!(
        err.contains("webhook.secret_env") && err.contains("MAILSLUICE_UNSET_VAR_X"),
        "{err}"
    );
    let err = parse(&hook("https://h.example.com/", "").replace("\"acme\"", "\"\"")).unwrap_err();
    assert!(err.contains("webhook.tenant"), "{err}");
    let err = parse(&hook("https://h.example.com/", "events = [\"sent\"]")).unwrap_err();
    assert!(err.contains("sent") && err.contains("line 11"), "{err}");
    let err = parse(&hook("https://h.example.com/", "events = []")).unwrap_err();
    assert!(
        err.contains("webhook.events") && err.contains("line 11"),
        "{err}"
    );
}

#[test]
fn two_webhooks_may_not_share_a_name() {
    let one = hook("https://h.example.com/", "name = \"n\"");
    let err = parse(&format!("{one}\n[[webhook]]\n{one}")).unwrap_err();
    assert!(err.contains("webhook.name") && err.contains("`n`"), "{err}");
}

#[test]
fn a_ca_file_must_hold_a_certificate() {
    let err = parse(&hook(
        "https://h.example.com/",
        "ca_file = \"/nonexistent/ca.pem\"",
    ));
    let err = err.unwrap_err();
    assert!(
        err.contains("webhook.ca_file") && err.contains("/nonexistent/ca.pem"),
        "{err}"
    );
    let empty =
        std::env::temp_dir().join(format!("mailsluice-empty-ca-{}.pem", std::process::id()));
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let extra = format!("ca_file = \"{}\"", empty.display());
    let err = parse(&hook("https://h.example.com/", &extra)).unwrap_err();
    assert!(err.contains("no certificate"), "{err}");
    std::fs::remove_file(empty).unwrap();
}
