//! The admin endpoint after real traffic: Prometheus metrics that match what was sent, peeks
//! that report and do not change `remaining`, readiness that follows the upstream.

use crate::support::config::TestConfig;
use crate::support::http::get;
use crate::support::relay::{smtp_relay, upstream_relay};
use crate::support::upstream::{Fault, Step, TestUpstream};
use std::collections::HashMap;

use mailsluice::upstream::upstreams::CHECK_MAX_AGE;

/// Parses the Prometheus text format: `name{labels}` -> value, checking every sample line.
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("sample line: series value");
        let name_end = series.find('{').unwrap_or(series.len());
        assert!(
            series[..name_end]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "metric name: {line}"
        );
        samples.insert(
            series.to_string(),
            value.parse::<f64>().expect("numeric value"),
        );
    }
    assert!(
        text.trim_end().ends_with("# EOF"),
        "OpenMetrics text ends with # EOF"
    );
    samples
}

const LAYER: &str =
    "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"recipients\"\n\
                     limit = 10\ninterval_ms = 3600000\nmode = \"reject\"\n";

#[tokio::test]
async fn metrics_count_what_was_sent_and_peek_takes_nothing() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", LAYER).await;
    let admin = relay.start_admin().await;
    let msg = b"X-Tenant: acme\r\nSubject: m\r\n\r\nx\r\n";
    let mut c = relay.client().await;
    for _ in 0..3 {
        assert_eq!(
            c.send_mail("a@example.com", &["b@example.net", "c@example.net"], msg)
                .await
                .0,
            250
        );
    }
    // 6 tokens of 10 taken; 3 recipients more than the 4 left is a 451.
    let four = [
        "1@x.example",
        "2@x.example",
        "3@x.example",
        "4@x.example",
        "5@x.example",
    ];
    assert_eq!(c.send_mail("a@example.com", &four, msg).await.0, 451);
    up.set_fault(Fault::reply(Step::EndOfData, 554, "5.7.1 no"));
    assert_eq!(
        c.send_mail("a@example.com", &["b@example.net"], msg)
            .await
            .0,
        554
    );

    let (status, text) = get(admin, "/metrics").await;
    assert_eq!(status, 200);
    let m = parse_metrics(&text);
    assert_eq!(
        m["mailsluice_messages_total{outcome=\"delivered\"}"], 3.0,
        "{text}"
    );
    assert_eq!(m["mailsluice_messages_total{outcome=\"throttled\"}"], 1.0);
    assert_eq!(
        m["mailsluice_messages_total{outcome=\"upstream_perm_fail\"}"],
        1.0
    );
    assert_eq!(m["mailsluice_throttled_total{layer=\"tenant\"}"], 1.0);
    assert_eq!(m["mailsluice_throttle_keys{layer=\"tenant\"}"], 1.0);
    assert_eq!(m["mailsluice_throttle_waiting{layer=\"tenant\"}"], 0.0);
    assert_eq!(
        m["mailsluice_upstream_seconds_count{upstream=\"default\"}"],
        4.0
    );
    assert_eq!(m["mailsluice_connections_open"], 1.0);
    assert!(!text.contains("acme"), "no per-key series");

    for _ in 0..2 {
        let (status, body) = get(admin, "/buckets/tenant/acme").await;
        assert_eq!(status, 200);
        let peek: serde_json::Value = serde_json::from_str(&body).unwrap();
        // 3 x 2 recipients delivered; the refused (451) and the failed (554) gave theirs back.
        assert_eq!(peek["remaining"], 4, "{body}");
        assert_eq!(peek["limit"], 10);
        assert_eq!(peek["reset"], 0);
        assert_eq!(peek["waiting"], 0);
    }
    let (status, body) = get(admin, "/buckets/nosuch/acme").await;
    assert_eq!(status, 404);
    assert!(body.contains("nosuch"), "{body}");
    let (status, _) = get(admin, "/healthz").await;
    assert_eq!(status, 200);
    relay.stop().await;
}

/// With `ready_requires_upstream`, readiness needs every route to reach its upstream or its
/// fallback.
#[tokio::test]
async fn readyz_lists_each_upstream_and_needs_each_route_to_reach_one() {
    let (main, backup) = (TestUpstream::start().await, TestUpstream::start().await);
    let spare = TestUpstream::start().await;
    let mut config = TestConfig::new();
    for (name, up) in [("main", &main), ("backup", &backup), ("spare", &spare)] {
        config = config
            .named_upstream(name, &up.url())
            .then("tls = \"none\"\ntimeout_ms = 2000");
    }
    let text = config
        .then("[[route]]\nupstream = \"main\"\nfallback = \"backup\"")
        .then("[admin]\nready_requires_upstream = true")
        .text();
    let relay = upstream_relay(&text).await;
    let admin = relay.start_admin().await;
    let ready = async || {
        let (status, body) = get(admin, "/readyz").await;
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        (status, json)
    };
    let (status, json) = ready().await;
    assert_eq!(status, 200, "{json}");
    for name in ["main", "backup", "spare"] {
        assert_eq!(json["upstreams"][name]["ok"], true, "{json}");
        assert_eq!(json["upstreams"][name]["paused"], false, "{json}");
    }
    // A check's result is reused for CHECK_MAX_AGE: each step below is a check later. (While
    // the GET's blocking client runs, the paused clock does not jump by itself.)
    tokio::time::pause();
    let later = async || tokio::time::advance(CHECK_MAX_AGE).await;
    spare.stop_listening().await;
    later().await;
    let (status, json) = ready().await;
    assert_eq!(status, 200, "no route needs spare: {json}");
    assert_eq!(json["upstreams"]["spare"]["ok"], false, "{json}");
    main.stop_listening().await;
    later().await;
    let (status, json) = ready().await;
    assert_eq!(status, 200, "the route still reaches its fallback: {json}");
    backup.stop_listening().await;
    later().await;
    let (status, json) = ready().await;
    assert_eq!(status, 503, "{json}");
    assert_eq!(json["upstream"]["ok"], false, "{json}");
    let error = json["upstream"]["error"].as_str().unwrap();
    assert!(
        error.contains("main: ") && error.contains("backup: "),
        "{error}"
    );
    relay.stop().await;
}

/// Upstream gone: `/readyz` stays 200 and says so (the replica still takes mail, answering
/// `451`); with `ready_requires_upstream` it is 503 until upstream is back.
#[tokio::test]
async fn readyz_shows_the_upstream_and_follows_it_only_when_asked() {
    let up = TestUpstream::start().await;
    let lenient = smtp_relay(&up.url(), "", "").await;
    let strict = smtp_relay(&up.url(), "", "[admin]\nready_requires_upstream = true\n").await;
    let (lenient_admin, strict_admin) = (lenient.start_admin().await, strict.start_admin().await);
    let ready = async |admin| {
        let (status, body) = get(admin, "/readyz").await;
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        (status, json)
    };
    for admin in [lenient_admin, strict_admin] {
        let (status, json) = ready(admin).await;
        assert_eq!(
            (status, &json["upstream"]["ok"]),
            (200, &true.into()),
            "{json}"
        );
    }
    tokio::time::pause();
    up.stop_listening().await;
    // The last check's result is answered until it is CHECK_MAX_AGE old (its exact age is
    // shown in `upstreams.rs`'s tests: here the paused clock may also jump while idle).
    tokio::time::advance(CHECK_MAX_AGE).await;
    for (admin, want) in [(lenient_admin, 200), (strict_admin, 503)] {
        let (status, json) = ready(admin).await;
        assert_eq!(status, want, "{json}");
        assert_eq!(json["ready"], want == 200, "{json}");
        assert_eq!(json["upstream"]["ok"], false, "{json}");
        assert!(json["upstream"]["error"].as_str().is_some(), "{json}");
        assert_eq!(json["listening"], true);
        assert_eq!(json["requires_upstream"], want == 503, "{json}");
    }
    up.resume_listening().await;
    tokio::time::advance(CHECK_MAX_AGE).await;
    let (status, json) = ready(strict_admin).await;
    assert_eq!(status, 200, "back when upstream is: {json}");
    lenient.stop().await;
    strict.stop().await;
}

/// `/metrics` says what readiness saw, for a dashboard's readiness panel: each upstream
/// reachable or not at its last check (none before the first), and whether the listeners
/// accept.
#[tokio::test]
async fn metrics_say_whether_upstream_was_reachable_and_the_listeners_accept() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    let admin = relay.start_admin().await;
    let metrics = async || parse_metrics(&get(admin, "/metrics").await.1);
    let upstream_up = "mailsluice_upstream_up{upstream=\"default\"}";
    let m = metrics().await;
    assert_eq!(m["mailsluice_listening"], 1.0);
    assert!(!m.contains_key(upstream_up), "no check yet, no sample");
    assert_eq!(get(admin, "/readyz").await.0, 200);
    assert_eq!(metrics().await[upstream_up], 1.0);
    tokio::time::pause();
    up.stop_listening().await;
    tokio::time::advance(CHECK_MAX_AGE).await;
    // Readiness is this replica's (upstream's state is in its body and in the metric).
    assert_eq!(get(admin, "/readyz").await.0, 200);
    assert_eq!(metrics().await[upstream_up], 0.0);
    relay.stop().await;
}

/// A reload puts the new layers in force for the peek too: the new limit is read, a renamed
/// layer is found under its new name, and the old name is gone.
#[tokio::test]
async fn peek_reads_the_config_in_force_after_a_reload() {
    let up = TestUpstream::start().await;
    let rest = |layer: &str, limit: u32| {
        format!(
            "[[throttle]]\nname = \"{layer}\"\nkey = \"header:X-Tenant\"\n\
             limit = {limit}\ninterval_ms = 3600000\n"
        )
    };
    let relay = smtp_relay(&up.url(), "", &rest("tenant", 10)).await;
    let admin = relay.start_admin().await;
    let msg = b"X-Tenant: acme\r\nSubject: m\r\n\r\nx\r\n";
    let mut c = relay.client().await;
    let peek = |body: &str| serde_json::from_str::<serde_json::Value>(body).unwrap();
    assert_eq!(
        c.send_mail("a@example.com", &["b@example.net"], msg)
            .await
            .0,
        250
    );
    let (_, body) = get(admin, "/buckets/tenant/acme").await;
    assert_eq!(
        (
            peek(&body)["limit"].clone(),
            peek(&body)["remaining"].clone()
        ),
        (10.into(), 9.into())
    );

    let reloaded = |layer: &str, limit: u32| {
        let text = mailsluice_config(
            &up.url(),
            &format!("tls = \"none\"\n{}", rest(layer, limit)),
        );
        mailsluice::serve::reload::reload(&relay.live, text).expect("the new config is used")
    };
    reloaded("tenant", 5);
    assert_eq!(
        c.send_mail("a@example.com", &["b@example.net"], msg)
            .await
            .0,
        250
    );
    let (status, body) = get(admin, "/buckets/tenant/acme").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (
            peek(&body)["limit"].clone(),
            peek(&body)["remaining"].clone()
        ),
        (5.into(), 4.into()),
        "{body}"
    );

    reloaded("tenants", 5);
    let (status, body) = get(admin, "/buckets/tenants/acme").await;
    assert_eq!(status, 200, "the renamed layer is found: {body}");
    assert_eq!(
        peek(&body)["remaining"],
        5,
        "a new layer starts full: {body}"
    );
    let (status, _) = get(admin, "/buckets/tenant/acme").await;
    assert_eq!(status, 404, "the old name is gone");
    relay.stop().await;
}

fn mailsluice_config(upstream_url: &str, rest: &str) -> mailsluice::config::Config {
    let text = crate::support::relay::config_text(upstream_url, "", rest);
    mailsluice::config::Config::parse(&text).expect("test config is valid")
}
