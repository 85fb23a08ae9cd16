//! Hold mode in the dialogue, on tokio's paused clock (sessions over in-memory streams, the
//! spool on a real directory: its syncs hold the clock while they run): a burst answered
//! `250` and released at the layer's rate, a key's messages in order, and the bounds.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::*;
use crate::support::host::scratch_path;
use crate::support::memory::subject_of;
use crate::support::relay::memory_relay;

const SEC: Duration = Duration::from_secs(1);

/// A burst 20 times the layer's rate from clients that never retry: every one answered
/// `250` within `max_wait_ms`, those whose tokens would come later held; upstream gets each
/// message once, never faster than the layer, and with no quota wasted.
#[tokio::test(start_paused = true)]
async fn a_burst_of_100_clients_all_get_250_and_upstream_gets_each_once_at_the_layers_rate() {
    let dir = scratch_path("spool-burst");
    let rest = hold_layer(5, 5, 2000, "") + &spool_section(&dir, "");
    let (relay, fwd) = memory_relay("", &rest).await;
    let start = Instant::now();
    let clients: Vec<_> = (0..100)
        .map(|i| send(&relay, "acme", &format!("m{i:03}")))
        .collect();
    let mut held = 0;
    for c in clients {
        let (code, text, at) = c.await.unwrap();
        assert_eq!(code, 250, "{text}");
        assert!(
            at - start <= 2 * SEC,
            "answered after {:?}: {text}",
            at - start
        );
        if text.ends_with("(held for later delivery)") {
            assert!(text.starts_with("2.0.0 Ok: queued as "), "{text}");
            held += 1;
        }
    }
    // Five in the burst, ten more within the 2 s wait at 5/s; the other 85 held.
    assert_eq!(held, 85);
    run_until("all 100 upstream", SEC / 10, 60 * SEC, || {
        fwd.messages().len() >= 100
    })
    .await;
    tokio::time::sleep(10 * SEC).await;
    let mut subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    assert_eq!(subjects.len(), 100, "each once");
    subjects.sort();
    subjects.dedup();
    assert_eq!(subjects.len(), 100, "each once");
    let times = fwd.times();
    assert_within_rate(&times, 5, 5);
    // No quota wasted: 95 after the burst at 5/s take 19 s.
    let last = *times.last().unwrap() - start;
    assert!(last <= 19 * SEC + SEC / 10, "the last at {last:?}");
    assert_eq!(files(&dir, "held"), 0, "the spool is empty");
    // Each released once, in one attempt: a held message waits for its turn in the queue.
    let released = |r: &str| {
        relay.metric(&format!(
            "mailsluice_spool_released_total{{result=\"{r}\"}}"
        ))
    };
    assert_eq!((released("delivered"), released("retry")), (85.0, 0.0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A key's held messages leave in the order they came, and another key is not held behind
/// them.
#[tokio::test(start_paused = true)]
async fn a_keys_held_messages_leave_in_the_order_they_came() {
    let dir = scratch_path("spool-order");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "");
    let (relay, fwd) = memory_relay("", &rest).await;
    let mut c = relay.memory_client().await;
    for i in 0..10 {
        let (code, text) = c
            .send_mail(
                "app@acme.example",
                &["u@example.net"],
                &message("acme", &format!("m{i}")),
            )
            .await;
        assert_eq!(code, 250, "{text}");
        assert_eq!(
            text.ends_with("(held for later delivery)"),
            i > 0,
            "m{i}: {text}"
        );
    }
    let (code, text) = c
        .send_mail(
            "app@beta.example",
            &["u@example.net"],
            &message("beta", "b0"),
        )
        .await;
    assert_eq!((code, text.contains("held")), (250, false), "{text}");
    run_until("all 11 upstream", SEC / 10, 60 * SEC, || {
        fwd.messages().len() >= 11
    })
    .await;
    let acme: Vec<String> = (fwd.messages().iter())
        .map(|(_, m)| subject_of(m))
        .filter(|s| s.starts_with('m'))
        .collect();
    let sent: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(acme, sent);
    let _ = std::fs::remove_dir_all(&dir);
}

/// While a key has messages held, its new one is held behind them even when its tokens are
/// there (the release before it is still with upstream): it never overtakes them.
#[tokio::test(start_paused = true)]
async fn a_new_message_is_held_behind_its_keys_held_ones_even_with_tokens_there() {
    let dir = scratch_path("spool-behind");
    let rest = hold_layer(10, 1, 0, "") + &spool_section(&dir, "");
    let (relay, fwd) = memory_relay("", &rest).await;
    fwd.answer_after(Duration::from_millis(500));
    let first = send(&relay, "acme", "m0");
    run_until("m0 with upstream", Duration::from_millis(1), SEC, || {
        fwd.messages().len() == 1
    })
    .await;
    for i in 1..4 {
        let (code, text, _) = send(&relay, "acme", &format!("m{i}")).await.unwrap();
        assert!(code == 250 && text.contains("held"), "m{i}: {text}");
    }
    assert_eq!(first.await.unwrap().0, 250);
    // m1 went at 0.1 s and is with upstream until 0.6 s; the bucket is full again by 0.2 s.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(relay.throttle.peek("tenant", "acme").unwrap().remaining, 1);
    let (code, text, _) = send(&relay, "acme", "m4").await.unwrap();
    assert!(code == 250 && text.contains("held"), "m4: {text}");
    run_until("all upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 5
    })
    .await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    assert_eq!(subjects, ["m0", "m1", "m2", "m3", "m4"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `max_held`: the key's next message gets the layer's `451 4.7.1 ... retry after`, nothing
/// of it kept; what was held goes on.
#[tokio::test(start_paused = true)]
async fn max_held_gives_the_layers_451() {
    let dir = scratch_path("spool-max-held");
    let rest = hold_layer(1, 1, 0, "max_held = 2") + &spool_section(&dir, "");
    let (relay, fwd) = memory_relay("", &rest).await;
    let mut c = relay.memory_client().await;
    let mut answers = Vec::new();
    for i in 0..4 {
        let msg = message("acme", &format!("m{i}"));
        answers.push(
            c.send_mail("app@acme.example", &["u@example.net"], &msg)
                .await,
        );
    }
    assert!(
        answers[1].1.contains("held") && answers[2].1.contains("held"),
        "{answers:?}"
    );
    let (code, text) = &answers[3];
    assert_eq!(*code, 451, "{text}");
    assert!(
        text.starts_with("4.7.1 Rate limit of layer tenant reached, retry after 1.000 s"),
        "{text}"
    );
    assert_eq!(
        relay.metric("mailsluice_spool_messages"),
        2.0,
        "read at the scrape"
    );
    run_until("three upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 3
    })
    .await;
    tokio::time::sleep(10 * SEC).await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    assert_eq!(subjects, ["m0", "m1", "m2"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The spool's `max_bytes`: `452 4.3.1 Insufficient system storage`, and what was held is
/// not lost; once released, there is room again. (One key may take all of it here:
/// `max_key_share = 1.0`.)
#[tokio::test(start_paused = true)]
async fn max_bytes_gives_452_and_loses_nothing_held() {
    let dir = scratch_path("spool-max-bytes");
    let rest =
        hold_layer(1, 1, 0, "") + &spool_section(&dir, "max_bytes = 2000\nmax_key_share = 1.0");
    let (relay, fwd) = memory_relay("", &rest).await;
    let big = |subject: &str| {
        let mut m = message("acme", subject);
        m.extend_from_slice(&[b'x'; 600]);
        m.extend_from_slice(b"\r\n");
        m
    };
    let mut c = relay.memory_client().await;
    let mut answers = Vec::new();
    for i in 0..4 {
        answers.push(
            c.send_mail(
                "app@acme.example",
                &["u@example.net"],
                &big(&format!("m{i}")),
            )
            .await,
        );
    }
    assert_eq!(answers[0].0, 250);
    assert!(
        answers[1].1.contains("held") && answers[2].1.contains("held"),
        "{answers:?}"
    );
    assert_eq!(
        (answers[3].0, answers[3].1.as_str()),
        (452, "4.3.1 Insufficient system storage, try again later")
    );
    run_until("three upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 3
    })
    .await;
    let (code, text) = c
        .send_mail("app@acme.example", &["u@example.net"], &big("m4"))
        .await;
    assert_eq!(code, 250, "room again: {text}");
    run_until("four upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 4
    })
    .await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    assert_eq!(subjects, ["m0", "m1", "m2", "m4"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spool that cannot be written: `452 4.3.1` to what would be held, `/readyz` 503 saying
/// so, until it can be written again; what was held is not lost. (Real time: readiness asks
/// the test upstream.)
#[tokio::test]
async fn an_unwritable_spool_gives_452_and_readyz_503_until_it_comes_back() {
    use crate::support::http::get;
    use crate::support::relay::smtp_relay;
    use crate::support::upstream::TestUpstream;
    let up = TestUpstream::start().await;
    let dir = scratch_path("spool-unwritable");
    // One token a minute: what is held stays held while the test runs.
    let layer = hold_layer(1, 1, 0, "").replace("interval_ms = 1000", "interval_ms = 60000");
    let relay = smtp_relay(&up.url(), "", &(layer + &spool_section(&dir, ""))).await;
    let admin = relay.start_admin().await;
    let ready = || async {
        let (status, body) = get(admin, "/readyz").await;
        (
            status,
            serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        )
    };
    let (status, json) = ready().await;
    assert_eq!(
        (status, &json["spool"]["ok"]),
        (200, &serde_json::json!(true)),
        "{json}"
    );
    let mut c = relay.client().await;
    for subject in ["m0", "m1"] {
        let msg = message("acme", subject);
        assert_eq!(
            c.send_mail("a@acme.example", &["u@example.net"], &msg)
                .await
                .0,
            250
        );
    }
    // Nothing can be created in the spool any more (root ignores permissions: `tmp/` made
    // a file).
    std::fs::remove_dir(dir.join("tmp")).unwrap();
    std::fs::write(dir.join("tmp"), b"").unwrap();
    let (code, text) = c
        .send_mail("a@acme.example", &["u@example.net"], &message("beta", "b0"))
        .await;
    assert_eq!(code, 250, "beta has tokens: {text}");
    let (code, text) = c
        .send_mail("a@acme.example", &["u@example.net"], &message("acme", "m2"))
        .await;
    assert_eq!(
        (code, text.as_str()),
        (452, "4.3.1 Insufficient system storage, try again later")
    );
    let (status, json) = ready().await;
    assert_eq!(status, 503, "{json}");
    assert_eq!(
        json["spool"]["error"], "the spool cannot be written",
        "{json}"
    );
    std::fs::remove_file(dir.join("tmp")).unwrap();
    std::fs::create_dir(dir.join("tmp")).unwrap();
    let (status, json) = ready().await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(files(&dir, "held"), 1, "m1 is still held");
    let _ = std::fs::remove_dir_all(&dir);
}
