//! The spool shared fairly between keys (`[spool] max_key_share`, half of `max_bytes` by
//! default): a key past its share gets its layer's `451`, and the others are still held; from
//! the attacker's side, one tenant's burst cannot make the spool full for another, even when
//! it comes first into an empty spool.

use std::time::Duration;

use crate::common::*;
use crate::support::host::scratch_path;
use crate::support::relay::memory_relay;

const SEC: Duration = Duration::from_secs(1);

/// A message of about `size` bytes for `tenant`.
fn sized(tenant: &str, subject: &str, size: usize) -> Vec<u8> {
    let mut m = message(tenant, subject);
    m.extend_from_slice(&vec![b'x'; size]);
    m.extend_from_slice(b"\r\n");
    m
}

/// A message of `n` lines of a thousand bytes for `tenant` (about `n` KB).
fn lines(tenant: &str, subject: &str, n: usize) -> Vec<u8> {
    let mut m = message(tenant, subject);
    for _ in 0..n {
        m.extend_from_slice(&[b'x'; 998]);
        m.extend_from_slice(b"\r\n");
    }
    m
}

fn is_held(text: &str) -> bool {
    text.ends_with("(held for later delivery)")
}

/// Two tenants: beta holds a message; acme bursts until its share (half of 10,000 bytes):
/// its next gets the layer's `451 4.7.1 ... retry after`, not the spool's `452`, and beta's
/// next message is still held.
#[tokio::test(start_paused = true)]
async fn a_key_past_its_share_gets_its_layers_451_and_the_other_is_still_held() {
    let dir = scratch_path("spool-share");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "max_bytes = 10000");
    let (relay, _fwd) = memory_relay("", &rest).await;
    let mut c = relay.memory_client().await;
    let to = ["u@example.net"];
    // b0 takes beta's token and goes; b1 is held.
    for i in 0..2 {
        let m = sized("beta", &format!("b{i}"), 900);
        let (code, text) = c.send_mail("app@beta.example", &to, &m).await;
        assert_eq!((code, is_held(&text)), (250, i == 1), "b{i}: {text}");
    }
    // acme: a0 goes, then held until its share.
    let mut held = 0;
    let refused = loop {
        let m = sized("acme", &format!("a{held}"), 900);
        let (code, text) = c.send_mail("app@acme.example", &to, &m).await;
        match code {
            250 => held += usize::from(is_held(&text)),
            _ => break (code, text),
        }
        assert!(held <= 10, "never refused");
    };
    assert!(
        refused.0 == 451
            && refused
                .1
                .starts_with("4.7.1 Rate limit of layer tenant reached"),
        "{refused:?}"
    );
    assert_eq!(held, 4, "about 1 KiB each: four fit in 5,000 bytes");
    let m = sized("beta", "b2", 900);
    let (code, text) = c.send_mail("app@beta.example", &to, &m).await;
    assert!(code == 250 && is_held(&text), "beta still held: {text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// From the attacker's side (hostile input, one tenant's spool): while a victim tenant has a
/// message held, an attacker sends 20 messages of 3,000 bytes at once into a spool of
/// 30,000. It gets at most half the spool, the rest of its burst the layer's `451`, never
/// the spool's `452`; the victim's next messages are still held, as many as its own share
/// allows.
#[tokio::test(start_paused = true)]
async fn one_tenants_burst_cannot_fill_the_spool_for_another() {
    let dir = scratch_path("spool-share-attack");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "max_bytes = 30000");
    let (relay, fwd) = memory_relay("", &rest).await;
    let mut victim = relay.memory_client().await;
    let to = ["u@example.net"];
    for i in 0..2 {
        let m = sized("victim", &format!("v{i}"), 100);
        let (code, text) = victim.send_mail("app@victim.example", &to, &m).await;
        assert_eq!((code, is_held(&text)), (250, i == 1), "{text}");
    }
    let burst: Vec<_> = (0..20)
        .map(|i| {
            let m = sized("attacker", &format!("x{i}"), 3000);
            send_as(&relay, "app@attacker.example", "u@example.net", m)
        })
        .collect();
    let mut answers = Vec::new();
    for b in burst {
        let (code, text, _) = b.await.unwrap();
        answers.push((code, text));
    }
    let held = answers.iter().filter(|(_, t)| is_held(t)).count();
    let refused: Vec<_> = answers.iter().filter(|(c, _)| *c != 250).collect();
    assert!((1..=5).contains(&held), "{held} held: {answers:?}");
    assert!(
        (refused.iter()).all(|(c, t)| *c == 451 && t.contains("Rate limit of layer tenant")),
        "{refused:?}"
    );
    assert!(refused.len() >= 14, "{answers:?}");
    let spool_bytes = relay.metric("mailsluice_spool_bytes");
    assert!(spool_bytes <= 15_000.0 + 1000.0, "{spool_bytes} bytes held");
    // The victim's next messages are still held, up to its own share.
    for i in 2..6 {
        let m = sized("victim", &format!("v{i}"), 100);
        let (code, text) = victim.send_mail("app@victim.example", &to, &m).await;
        assert!(code == 250 && is_held(&text), "v{i}: {text}");
    }
    // And all of them reach upstream in time.
    run_until("the victim's upstream", SEC / 10, 60 * SEC, || {
        let got = fwd.messages();
        (2..6).all(|i| (got.iter()).any(|(_, m)| subject(m) == format!("v{i}")))
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The attacker first, into an empty spool (nobody else holds anything yet): 9 messages of
/// about 300 KB into a spool of 3 MB. It gets half of it, the rest of its burst the layer's
/// `451`; the next tenant's message is still held, not refused for storage.
#[tokio::test(start_paused = true)]
async fn a_burst_into_an_empty_spool_leaves_room_for_the_next_tenant() {
    let dir = scratch_path("spool-share-first");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "max_bytes = 3000000");
    let (relay, _fwd) = memory_relay("", &rest).await;
    let mut attacker = relay.memory_client().await;
    let to = ["u@example.net"];
    let mut answers = Vec::new();
    for i in 0..9 {
        let m = lines("attacker", &format!("x{i}"), 300);
        answers.push(attacker.send_mail("app@attacker.example", &to, &m).await);
    }
    let held = answers.iter().filter(|(_, t)| is_held(t)).count();
    assert!((1..=5).contains(&held), "{held} held: {answers:?}");
    let refused: Vec<_> = answers.iter().filter(|(c, _)| *c != 250).collect();
    assert!(
        !refused.is_empty()
            && (refused.iter()).all(|(c, t)| *c == 451 && t.contains("Rate limit of layer tenant")),
        "{answers:?}"
    );
    let spool_bytes = relay.metric("mailsluice_spool_bytes");
    assert!(spool_bytes <= 1_500_000.0, "{spool_bytes} bytes held");
    let mut victim = relay.memory_client().await;
    for i in 0..2 {
        let m = lines("victim", &format!("v{i}"), 300);
        let (code, text) = victim.send_mail("app@victim.example", &to, &m).await;
        assert_eq!((code, is_held(&text)), (250, i == 1), "v{i}: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
