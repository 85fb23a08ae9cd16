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
/// families appear once they have one, and a delivery, a layer's refusal and an upstream
/// throttle reply give every one of them one.
pub async fn metrics_with_samples() -> String {
    let up = TestUpstream::start().await;
    let layer = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 1\n\
                 interval_ms = 3600000\nmode = \"reject\"\n";
    let relay = smtp_relay(&up.url(), "", layer).await;
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
