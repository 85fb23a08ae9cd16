//! The shipped Grafana dashboard and Prometheus alert rules name only metrics the relay
//! exposes: a renamed metric must not leave a panel or an alert silently empty.

use std::collections::BTreeSet;

use crate::support::http::get;
use crate::support::relay::smtp_relay;
use crate::support::upstream::{Fault, Step, TestUpstream};

const FILES: [&str; 2] = [
    "config/examples/grafana-dashboard.json",
    "config/examples/alerts.yml",
];

/// The metric families of an OpenMetrics text (`# TYPE <name> <type>` lines).
pub fn families(text: &str) -> BTreeSet<String> {
    (text.lines())
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every `mailsluice_...` name in `text`.
fn names_used(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("mailsluice_") {
        let tail = &rest[at..];
        let end =
            (tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The `/metrics` text of a relay in which every labelled family has a sample: labelled
/// families appear once they have one, and a delivery, a layer's refusal, an upstream
/// throttle reply and a readiness check give every one of them one.
pub async fn metrics_with_samples() -> String {
    let up = TestUpstream::start().await;
    let layer = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 1\n\
                 interval_ms = 3600000\nmode = \"reject\"\n";
    // A webhook whose receiver is never there gives the webhook families their samples.
    std::env::set_var("MAILSLUICE_TEST_DASHBOARD_WEBHOOK", "secret");
    let webhook = "[reputation]\nkey = \"header:X-Tenant\"\n[[webhook]]\ntenant = \"*\"\n\
                   url = \"https://127.0.0.1:9/\"\nsecret_env = \"MAILSLUICE_TEST_DASHBOARD_WEBHOOK\"\n\
                   allow_networks = [\"127.0.0.0/8\"]\n";
    let relay = smtp_relay(&up.url(), "", &format!("{layer}{webhook}")).await;
    let admin = relay.start_admin().await;
    let mut c = relay.client().await;
    let msg = |tenant: &str| format!("X-Tenant: {tenant}\r\nSubject: s\r\n\r\nx\r\n");
    let to = ["b@example.net"];
    let ses = "Throttling failure: Maximum sending rate exceeded.";
    for (tenant, code) in [("a", 250), ("a", 451), ("b", 454)] {
        if code == 454 {
            up.set_fault(Fault::reply(Step::EndOfData, 454, ses));
        }
        let message = msg(tenant);
        let sent = c.send_mail("a@example.com", &to, message.as_bytes()).await;
        assert_eq!(sent.0, code, "tenant {tenant}");
    }
    // A readiness check gives `upstream_up` its sample.
    assert_eq!(get(admin, "/readyz").await.0, 200);
    let (status, text) = get(admin, "/metrics").await;
    assert_eq!(status, 200);
    relay.stop().await;
    text
}

#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_use_is_exposed() {
    let text = metrics_with_samples().await;
    let families = families(&text);
    assert!(families.contains("mailsluice_messages"), "{text}");
    for file in FILES {
        let used = names_used(&std::fs::read_to_string(file).expect("shipped file"));
        assert!(used.len() >= 5, "{file} names its metrics: {used:?}");
        for name in used {
            let exposed = ["", "_total", "_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| {
                    (name.strip_suffix(suffix)).is_some_and(|family| families.contains(family))
                });
            assert!(
                exposed,
                "{file} uses {name}, which /metrics does not expose: {families:?}"
            );
        }
    }
}

/// The alert rules fire on series made to fire them, and stay quiet on the others
/// (`config/examples/alerts.test.yml`: a relay down, upstream refusing credentials, Redis
/// failing under `on_error = "local"`).
#[test]
fn promtool_plays_series_that_fire_the_alerts() {
    if !crate::support::host::have_program("promtool") {
        return;
    }
    for args in [
        ["check", "rules", "config/examples/alerts.yml"],
        ["test", "rules", "config/examples/alerts.test.yml"],
    ] {
        let out = std::process::Command::new("promtool")
            .args(args)
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The dashboard picks instances (every query of the relay's series, and `up`, is limited to
/// the `instance` variable) and has the panels an operator looks at first: latency per
/// upstream, sessions, readiness, the shared store's errors.
#[test]
fn the_dashboard_picks_instances_and_shows_each_upstream_sessions_and_readiness() {
    let text = std::fs::read_to_string(FILES[0]).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(
        variables.iter().any(|v| v["name"] == "instance"),
        "{variables:?}"
    );
    let panels = dashboard["panels"].as_array().unwrap();
    let mut exprs = Vec::new();
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().to_string();
            let series = expr.matches("mailsluice_").count() + expr.matches("up{job").count();
            let scoped = expr.matches("instance=~\"$instance\"").count();
            assert_eq!(series, scoped, "every series limited to $instance: {expr}");
            exprs.push((panel["title"].as_str().unwrap().to_string(), expr));
        }
    }
    for (what, wanted) in [
        (
            "latency per upstream",
            "sum by (upstream, le) (rate(mailsluice_upstream_seconds_bucket",
        ),
        ("sessions", "sum by (activity) (mailsluice_sessions"),
        ("readiness: scraped", "up{job=\"mailsluice\""),
        ("readiness: upstream reachable", "mailsluice_upstream_up"),
        ("readiness: listening", "mailsluice_listening"),
        (
            "store errors",
            "sum by (on_error) (rate(mailsluice_throttle_store_errors_total",
        ),
    ] {
        assert!(
            exprs.iter().any(|(_, e)| e.contains(wanted)),
            "a panel for {what} ({wanted}): {exprs:?}"
        );
    }
}
