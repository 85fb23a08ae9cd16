//! What the relay records of held messages: a released one counted as delivered (the metric
//! and the status page's Messages table, which has a held row too), the `held` line with the
//! spool id its client was told, and release lines with upstream's reply and its enhanced code.

use std::time::Duration;

use crate::common::*;
use crate::support::host::scratch_path;
use crate::support::http::get;
use crate::support::relay::{config_text, Relay};
use crate::support::throttle::Events;

const SEC: Duration = Duration::from_secs(1);

/// The value of `name` in a recorded event's fields (`name=value `).
fn field<'a>(fields: &'a str, name: &str) -> &'a str {
    let start = fields
        .find(&format!("{name}="))
        .unwrap_or_else(|| panic!("no {name} in {fields}"))
        + name.len()
        + 1;
    let rest = &fields[start..];
    // The next field starts with ` word=`; values may hold spaces.
    let end = (rest.match_indices(' '))
        .map(|(i, _)| i)
        .find(|&i| {
            let next = &rest[i + 1..];
            next.split_once('=').is_some_and(|(n, _)| {
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            })
        })
        .unwrap_or(rest.trim_end().len());
    &rest[..end]
}

/// The id in `250 2.0.0 Ok: queued as <id> (held for later delivery)`.
fn queued_id(text: &str) -> String {
    let rest = text.split("queued as ").nth(1).expect("a held reply");
    rest.split_whitespace().next().unwrap().to_string()
}

/// One message sent straight through and four held, then released: five delivered in the
/// metric and on the status page, four held; each `held` line names its spool id.
#[tokio::test(start_paused = true)]
async fn released_messages_are_counted_as_delivered_and_held_ones_as_held() {
    let (events, _capture) = Events::capture();
    let dir = scratch_path("spool-counted");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "");
    let fwd = Refusing::new(&[]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let admin = relay.start_admin().await;
    let mut c = relay.memory_client().await;
    let mut ids = Vec::new();
    for subject in ["m0", "m1", "m2", "m3", "m4"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("a@acme.example", &["u@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{text}");
        if subject != "m0" {
            ids.push(queued_id(&text));
        }
    }
    let held_lines: Vec<String> = (events.named("message").into_iter())
        .map(|(_, f)| f)
        .filter(|f| field(f, "outcome") == "held")
        .collect();
    let logged: Vec<&str> = held_lines.iter().map(|f| field(f, "id")).collect();
    assert_eq!(
        logged, ids,
        "each held line names the id its client was told"
    );

    run_until("the four released", SEC / 10, 30 * SEC, || {
        fwd.messages().len() == 5
    })
    .await;
    let delivered = "mailsluice_messages_total{outcome=\"delivered\"}";
    run_until("the four counted", SEC / 10, 5 * SEC, || {
        relay.metric(delivered) == 5.0
    })
    .await;
    assert_eq!(
        relay.metric("mailsluice_messages_total{outcome=\"held\"}"),
        4.0
    );
    assert_eq!(
        relay.metric("mailsluice_spool_released_total{result=\"delivered\"}"),
        4.0
    );
    let (_, page) = get(admin, "/").await;
    for row in [
        "<tr><td>delivered</td><td class=\"num\">5</td><td class=\"num\">5</td>",
        "<tr><td>held</td><td class=\"num\">4</td><td class=\"num\">4</td>",
    ] {
        assert!(page.contains(row), "{row}: {page}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A release line writes upstream's reply as the session's line does, its enhanced code
/// included: a deferral's `451 4.2.0 ...`, then the `250 2.0.0 ...` that took it.
#[tokio::test(start_paused = true)]
async fn release_lines_write_upstreams_reply_with_its_enhanced_code() {
    let (events, _capture) = Events::capture();
    let dir = scratch_path("spool-release-lines");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "");
    let fwd = Refusing::new(&[]);
    fwd.deferred
        .lock()
        .unwrap()
        .push("later@example.net".into());
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    let m0 = message("acme", "m0");
    assert_eq!(
        c.send_mail("a@acme.example", &["ok@example.net"], &m0)
            .await
            .0,
        250
    );
    let m1 = message("acme", "m1");
    let (code, text) = c
        .send_mail("a@acme.example", &["later@example.net"], &m1)
        .await;
    assert_eq!(code, 250, "{text}");
    let id = queued_id(&text);
    run_until("m1 deferred once", SEC / 10, 10 * SEC, || {
        *fwd.tried.lock().unwrap() == 2
    })
    .await;
    fwd.deferred.lock().unwrap().clear();
    run_until("m1 upstream", SEC / 10, 10 * SEC, || {
        fwd.messages().len() == 2
    })
    .await;
    run_until("two release lines", SEC / 10, 5 * SEC, || {
        events.named("release").len() == 2
    })
    .await;
    let lines: Vec<String> = events
        .named("release")
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    let seen: Vec<(&str, &str, &str)> = (lines.iter())
        .map(|f| (field(f, "id"), field(f, "outcome"), field(f, "upstream")))
        .collect();
    assert_eq!(
        seen,
        [
            (
                id.as_str(),
                "upstream_temp_fail",
                "451 4.2.0 upstream: try again later"
            ),
            (id.as_str(), "delivered", "250 2.0.0 Ok up-2"),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
