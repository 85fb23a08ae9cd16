//! A key's release on tokio's paused clock: a message upstream keeps deferring steps aside
//! and the key's others go on at the layer's rate (no head-of-line blocking); several of a
//! key with upstream at once, up to its upstream's `pool_size`, in the order they came and
//! within the layer.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::*;
use crate::support::host::scratch_path;
use crate::support::memory::subject_of;
use crate::support::relay::{config_text, memory_relay, Relay};

const SEC: Duration = Duration::from_secs(1);

/// One held message upstream defers for good (`451 4.2.0` at every attempt, until
/// `max_hold_ms`) and 20 held behind it: the 20 reach upstream at the layer's rate, in the
/// order they came, while the deferred one is tried again on its own backoff and given up
/// at `max_hold_ms`.
#[tokio::test(start_paused = true)]
async fn a_message_upstream_defers_does_not_hold_back_its_keys_others() {
    let dir = scratch_path("spool-head-of-line");
    let rest = hold_layer(5, 1, 0, "") + &spool_section(&dir, "max_hold_ms = 30000");
    let fwd = Refusing::new(&[]);
    (fwd.deferred.lock().unwrap()).push("later@example.net".into());
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let start = Instant::now();
    let mut c = relay.memory_client().await;
    // w0 takes the key's token and goes; m0 (deferred upstream) and the 20 are held.
    let mut sends = vec![("ok@example.net", "w0".to_string())];
    sends.push(("later@example.net", "m0".into()));
    sends.extend((1..=20).map(|i| ("ok@example.net", format!("m{i:02}"))));
    for (rcpt, subject) in &sends {
        let (code, text) = c
            .send_mail("app@acme.example", &[rcpt], &message("acme", subject))
            .await;
        assert_eq!(code, 250, "{subject}: {text}");
        assert_eq!(text.contains("held"), subject != "w0", "{subject}: {text}");
    }
    run_until("the 20 upstream", SEC / 10, 60 * SEC, || {
        fwd.messages().len() == 21
    })
    .await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject(m)).collect();
    let expected: Vec<String> = sends.iter().map(|(_, s)| s.clone()).collect();
    let expected: Vec<&String> = expected.iter().filter(|s| *s != "m0").collect();
    assert_eq!(subjects.iter().collect::<Vec<_>>(), expected, "in order");
    // At 5/s: a token every 200 ms (m0's second try queues behind the 20); never faster.
    let times = fwd.at.lock().unwrap().clone();
    assert_within_rate(&times, 1, 5);
    let last = *times.last().unwrap() - start;
    assert!(last <= 5 * SEC, "the 20th upstream after {last:?}");
    assert_eq!(relay.metric("mailsluice_spool_messages"), 1.0, "m0 alone");
    // m0 goes on being tried on its own backoff (1, 2, 4, 5, 5 ... s) and is given up at
    // max_hold_ms (30 s), kept as failed (no report_from).
    run_until("m0 given up", SEC / 10, 60 * SEC, || {
        relay.metric("mailsluice_spool_given_up_total{reason=\"expired\"}") == 1.0
    })
    .await;
    assert!(start.elapsed() >= 30 * SEC, "{:?}", start.elapsed());
    let tried = *fwd.tried.lock().unwrap() - 21;
    assert!((5..=9).contains(&tried), "m0 tried {tried} times");
    assert_eq!(files(&dir, "failed"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An upstream 1 s away (its answer comes 1 s after the message) with `pool_size = 3`, a layer
/// of 10/s: 20 held messages of one key go three at a time (never more), take their tokens
/// in the order they came and reach upstream in that order, never faster than the layer.
#[tokio::test(start_paused = true)]
async fn a_keys_messages_go_up_to_pool_size_at_once_in_order_within_the_layer() {
    let dir = scratch_path("spool-in-flight");
    let rest = "pool_size = 3\n".to_string() + &hold_layer(10, 1, 0, "") + &spool_section(&dir, "");
    let (relay, fwd) = memory_relay("", &rest).await;
    fwd.answer_after(SEC);
    // m00 takes the token and goes (its client waits for upstream's answer); the rest held.
    let first = send(&relay, "acme", "m00");
    tokio::task::yield_now().await;
    run_until("m00 upstream", SEC / 100, 10 * SEC, || {
        fwd.messages().len() == 1
    })
    .await;
    let mut c = relay.memory_client().await;
    for i in 1..=20 {
        let (code, text) = c
            .send_mail(
                "app@acme.example",
                &["u@example.net"],
                &message("acme", &format!("m{i:02}")),
            )
            .await;
        assert!(code == 250 && text.contains("held"), "m{i}: {text}");
    }
    assert_eq!(first.await.unwrap().0, 250);
    run_until("all 21 upstream", SEC / 10, 60 * SEC, || {
        fwd.messages().len() == 21
    })
    .await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    let expected: Vec<String> = (0..=20).map(|i| format!("m{i:02}")).collect();
    assert_eq!(subjects, expected, "in the order they came");
    let times = fwd.times();
    assert_within_rate(&times, 1, 10);
    // With upstream: those that came within the 1 s before each one (its answer not back).
    let held_times = &times[1..];
    let at_once = (0..held_times.len())
        .map(|i| {
            (held_times[..=i].iter())
                .filter(|t| **t + SEC > held_times[i])
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(at_once, 3, "pool_size at once, never more");
    // Three every second or so (each batch's answers, then the next three's tokens), not
    // one: 20 released in about 7 s.
    let took = held_times[19] - held_times[0];
    assert!(took <= 9 * SEC, "20 released over {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
