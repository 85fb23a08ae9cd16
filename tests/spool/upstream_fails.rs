//! What a hold-mode layer does when upstream fails: every temporary end at upstream (down at
//! connect, `421` at the greeting, `4xx` at MAIL, RCPT or the final dot, the connection lost
//! after the final dot, TLS or the relay's login refused; SES unavailable or throttling) is
//! held, and once upstream is back each held message reaches it exactly once; a `5xx` still
//! reaches the client. And the breaker: a dead upstream is tried once per probe interval
//! however many clients send, and what it kept back goes as soon as it answers again.

use std::path::Path;
use std::time::Duration;

use crate::common::*;
use crate::support::config::TestConfig;
use crate::support::host::scratch_path;
use crate::support::http::request;
use crate::support::relay::{config_text, Relay};
use crate::support::ses::{forwarder, FakeSes, GOOD_KEY};
use crate::support::upstream::{Fault, Step, TestUpstream, DEFAULT_EXTENSIONS};
use crate::support::wait::until;

const SEC: Duration = Duration::from_secs(1);

/// Clients of a hold layer for each case: more than `breaker_failures` (5), so the breaker
/// opens on the way.
const CLIENTS: usize = 6;

/// What goes wrong upstream, and how it is mended.
enum Trouble {
    /// Nothing listens on its port.
    Down,
    /// A scripted fault.
    Fault(Fault),
    /// It refuses the relay's login (`535`): `451 4.7.0` for the client.
    Login,
}

/// A relay forwarding to `up` over SMTP, a hold layer of 100/s, the spool in `dir`, probes
/// every 100 ms.
async fn relay_to(up: &TestUpstream, dir: &Path, upstream_extra: &str) -> Relay {
    let text = TestConfig::new()
        .upstream(&up.url())
        .then(&format!(
            "timeout_ms = 2000\nbreaker_probe_ms = 100\n{upstream_extra}"
        ))
        .then(&hold_layer(100, 100, 0, ""))
        .then(&spool_section(dir, ""))
        .text();
    Relay::start_configured(&text).await
}

/// Sends `CLIENTS` messages at once; each client's reply.
async fn burst(relay: &Relay, case: &str) -> Vec<(u16, String)> {
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| send(relay, "acme", &format!("{case}-{i}")))
        .collect();
    let mut replies = Vec::new();
    for c in clients {
        let (code, text, _) = c.await.unwrap();
        replies.push((code, text));
    }
    replies
}

fn assert_all_held(case: &str, replies: &[(u16, String)]) {
    for (code, text) in replies {
        assert_eq!(*code, 250, "{case}: {text}");
        assert!(
            text.starts_with("2.0.0 Ok: queued as ") && text.ends_with("(held for later delivery)"),
            "{case}: {text}"
        );
    }
}

/// Waits until the spool in `dir` is empty; the subjects upstream got, each once.
async fn delivered_once(case: &str, up: &TestUpstream, dir: &Path) {
    until(&format!("{case}: the spool empty"), async || {
        files(dir, "held") == 0 && up.messages().len() >= CLIENTS
    })
    .await;
    let mut subjects: Vec<String> = (up.messages().iter()).map(|m| subject(&m.data)).collect();
    subjects.sort();
    let expected: Vec<String> = (0..CLIENTS).map(|i| format!("{case}-{i}")).collect();
    assert_eq!(subjects, expected, "{case}: each exactly once");
}

#[tokio::test]
async fn every_temporary_failure_of_an_smtp_upstream_is_held_and_delivered_once_when_it_is_back() {
    let cases = [
        ("down", Trouble::Down),
        (
            "greeting-421",
            Trouble::Fault(Fault::reply(Step::Greeting, 421, "4.3.2 closing")),
        ),
        (
            "mail-451",
            Trouble::Fault(Fault::reply(Step::Mail, 451, "4.3.0 try later")),
        ),
        (
            "rcpt-452",
            Trouble::Fault(Fault::reply(Step::Rcpt, 452, "4.2.2 mailbox full")),
        ),
        (
            "data-451",
            Trouble::Fault(Fault::reply(Step::Data, 451, "4.3.0 try later")),
        ),
        (
            "dot-451",
            Trouble::Fault(Fault::reply(Step::EndOfData, 451, "4.3.0 try later")),
        ),
        ("dropped-after-dot", Trouble::Fault(Fault::DropAfterDot)),
        ("login-refused", Trouble::Login),
    ];
    for (case, trouble) in cases {
        let dir = scratch_path(&format!("spool-upstream-{case}"));
        let up = TestUpstream::start().await;
        let login = "username = \"relay\"\npassword = \"s3cret\"\n";
        let extra = match trouble {
            Trouble::Login => login,
            _ => "",
        };
        let relay = relay_to(&up, &dir, &format!("tls = \"none\"\n{extra}")).await;
        match &trouble {
            Trouble::Down => up.stop_listening().await,
            Trouble::Fault(fault) => up.set_fault(fault.clone()),
            Trouble::Login => up.require_auth("relay", "not-that"),
        }
        assert_all_held(case, &burst(&relay, case).await);
        assert!(up.messages().is_empty(), "{case}: nothing arrived");
        match &trouble {
            Trouble::Down => up.resume_listening().await,
            Trouble::Fault(_) => up.set_fault(Fault::None),
            Trouble::Login => up.require_auth("relay", "s3cret"),
        }
        delivered_once(case, &up, &dir).await;
        relay.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Upstream refuses STARTTLS where the relay requires it: the relay's own TLS is at fault
/// (`4.7.0`), so the clients of a hold layer are held, and nothing is sent in the clear.
#[tokio::test]
async fn starttls_refused_is_held() {
    let dir = scratch_path("spool-upstream-starttls");
    let up = TestUpstream::start().await;
    let mut extensions = DEFAULT_EXTENSIONS.to_vec();
    extensions.push("STARTTLS");
    up.set_extensions(&extensions);
    let relay = relay_to(&up, &dir, "tls = \"required\"\n").await;
    assert_all_held("starttls", &burst(&relay, "starttls").await);
    assert!(up.messages().is_empty());
    assert_eq!(files(&dir, "held"), CLIENTS);
    relay.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Upstream's refusal for good stays the client's answer, hold layer or not.
#[tokio::test]
async fn a_5xx_from_upstream_still_reaches_the_client() {
    let dir = scratch_path("spool-upstream-5xx");
    let up = TestUpstream::start().await;
    let relay = relay_to(&up, &dir, "tls = \"none\"\n").await;
    up.set_fault(Fault::reply(Step::Rcpt, 550, "5.1.1 no such user"));
    for (code, text) in burst(&relay, "refused").await {
        assert_eq!(code, 550, "{text}");
        assert!(text.contains("no such user"), "{text}");
    }
    assert_eq!(files(&dir, "held"), 0, "nothing held");
    relay.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same with `ses://` against the SESv2 stand-in: SES unavailable and SES throttling are
/// held and delivered once when SES answers again; its refusal of the message reaches the
/// client.
#[tokio::test]
async fn ses_unavailable_or_throttling_is_held_and_its_refusal_reaches_the_client() {
    let fake = FakeSes::start().await;
    let dir = scratch_path("spool-upstream-ses");
    let text = TestConfig::new()
        .then(&format!(
            "[upstream]\n{}",
            fake.upstream_toml("timeout_ms = 5000\nbreaker_probe_ms = 100")
        ))
        .then(&hold_layer(100, 100, 0, ""))
        .then(&spool_section(&dir, ""))
        .text();
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    let cases = [
        (
            "ses-unavailable",
            (503, "ServiceUnavailable", "Service is unavailable."),
        ),
        (
            "ses-throttling",
            (
                400,
                "TooManyRequestsException",
                "Maximum sending rate exceeded.",
            ),
        ),
        (
            "ses-internal",
            (500, "InternalFailure", "Internal failure."),
        ),
    ];
    let mut sent = 0;
    for (case, answer) in cases {
        fake.fail_with(Some(answer));
        assert_all_held(case, &burst(&relay, case).await);
        fake.fail_with(None);
        sent += CLIENTS;
        until(&format!("{case}: delivered"), async || {
            files(&dir, "held") == 0 && fake.sent().len() >= sent
        })
        .await;
        let mut subjects: Vec<String> = (fake.sent().iter())
            .map(|m| subject(&m.raw))
            .filter(|s| s.starts_with(case))
            .collect();
        subjects.sort();
        let expected: Vec<String> = (0..CLIENTS).map(|i| format!("{case}-{i}")).collect();
        assert_eq!(subjects, expected, "{case}: each exactly once");
    }
    fake.fail_with(Some((
        400,
        "MessageRejected",
        "Email address is not verified.",
    )));
    for (code, text) in burst(&relay, "ses-rejected").await {
        assert_eq!(code, 554, "{text}");
        assert!(text.contains("not verified"), "{text}");
    }
    assert_eq!(files(&dir, "held"), 0);
    relay.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dead upstream while clients keep sending: the first failure opens its breaker, and from
/// then on the clients are held at once and upstream is tried once per `breaker_probe_ms`
/// (the spool's probe), not once per message. When it answers again, the first probe closes
/// the breaker and every message it kept back goes at once, not after its own backoff.
#[tokio::test(start_paused = true)]
async fn a_dead_upstream_is_probed_once_per_interval_and_its_messages_go_when_it_is_back() {
    let dir = scratch_path("spool-breaker");
    // Backoffs of 30 s to 60 s: a message released sooner was released by the return.
    let spool = format!(
        "[spool]\ndir = \"{}\"\nmin_free_bytes = 0\nretry_min_ms = 30000\nretry_max_ms = 60000\n",
        dir.display()
    );
    // The hold layer for the messages of the `hold` tier only.
    let tier = "match = { header = \"X-Tier\", value = \"hold\" }";
    let rest = format!(
        "breaker_probe_ms = 1000\n{}{spool}",
        hold_layer(100, 100, 0, tier)
    );
    let tiered = |tier: &str, tenant: &str, subject: &str| {
        let msg = format!("X-Tier: {tier}\r\n").into_bytes();
        [msg, message(tenant, subject)].concat()
    };
    let fwd = Refusing::new(&[]);
    *fwd.down.lock().unwrap() = true;
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    // 100 clients over 10 s, each answered at once.
    for i in 0..100 {
        // Each of its own key: none is held behind another, only for upstream's failure.
        let tenant = format!("t{i:03}");
        let msg = tiered("hold", &tenant, &format!("m{i:03}"));
        let (code, text, _) = send_as(&relay, "app@acme.example", "u@example.net", msg)
            .await
            .unwrap();
        assert_eq!(code, 250, "m{i:03}: {text}");
        assert!(text.ends_with("(held for later delivery)"), "{text}");
        tokio::time::sleep(SEC / 10).await;
    }
    let tried = *fwd.tried.lock().unwrap();
    // The first client's attempt, then one probe a second.
    assert!(tried <= 12, "upstream tried {tried} times in 10 s");
    assert!(tried >= 5, "probed while down: {tried}");
    // Messages no hold layer charges still try upstream, each, and get its answer.
    for n in 0..3 {
        let msg = tiered("basic", "other", &format!("basic-{n}"));
        let (code, text, _) = send_as(&relay, "app@acme.example", "u@example.net", msg)
            .await
            .unwrap();
        assert_eq!(
            (code, text.as_str()),
            (451, "4.4.1 Upstream unavailable, try again later")
        );
    }
    let tried_basic = (fwd.tried_subjects.lock().unwrap().iter())
        .filter(|s| s.starts_with("basic-"))
        .count();
    assert_eq!(tried_basic, 3, "each tried upstream");
    assert_eq!(
        relay.metric("mailsluice_upstream_breaker_open{upstream=\"default\"}"),
        1.0
    );
    assert!(relay.metric("mailsluice_upstream_failing_since_seconds{upstream=\"default\"}") > 0.0);
    // The status page's row: failing, since when, and the messages it keeps back.
    let admin = relay.start_admin().await;
    let (status, page) = request(admin, "GET", "/", None).await;
    assert_eq!(status, 200);
    let row = page
        .split("<td class=\"any\">default</td>")
        .nth(1)
        .unwrap_or_default();
    let row = row.split("</tr>").next().unwrap_or_default();
    assert!(row.contains("<span class=\"bad\">failing</span>"), "{row}");
    let held = row.rsplit("<td class=\"num\">").next().unwrap_or_default();
    let held: usize = held.trim_end_matches("</td>").parse().unwrap();
    assert!(held >= 90, "held because of it: {row}");
    *fwd.down.lock().unwrap() = false;
    // The next probe within a second, then everything it kept back at once.
    run_until("all 100 upstream", SEC / 20, 2 * SEC, || {
        fwd.messages().len() >= 100
    })
    .await;
    let mut subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject(m)).collect();
    subjects.sort();
    subjects.dedup();
    assert_eq!(subjects.len(), 100, "each once");
    assert_eq!(
        relay.metric("mailsluice_upstream_breaker_open{upstream=\"default\"}"),
        0.0
    );
    let (_, page) = request(admin, "GET", "/", None).await;
    let up = "<td>yes</td><td>-</td><td class=\"num\">0</td></tr>";
    assert!(page.contains(up), "{page}");
    let _ = std::fs::remove_dir_all(&dir);
}
