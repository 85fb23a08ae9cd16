//! The spool on a real directory: what a `250` leaves on disk, read back after a restart,
//! bounds, damage, a directory that cannot be written, one process per directory.

use crate::message::Envelope;
use std::sync::Arc;
use std::time::Duration;

use std::time::{SystemTime, UNIX_EPOCH};

use super::*;
use crate::clock::TokioClock;
use crate::config::SpoolConfig;

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ms-spool-{name}-{}-{:x}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(dir: &std::path::Path) -> SpoolConfig {
    let text = format!(
        "dir = {:?}\nmin_free_bytes = 0\n",
        dir.display().to_string()
    );
    toml::from_str(&text).unwrap()
}

fn key(k: &str) -> HeldKey {
    HeldKey {
        layer: "tenant".into(),
        key: k.into(),
    }
}

fn envelope() -> Envelope {
    Envelope {
        from: Some("app@acme.example".into()),
        rcpts: vec!["user@example.net".into()],
        ..Envelope::default()
    }
}

fn origin() -> Origin {
    Origin {
        auth_tenant: Some("acme".into()),
        header_trusted: false,
        peer: "127.0.0.1:40000".parse().unwrap(),
    }
}

async fn hold(spool: &Spool, id: &str, k: &str, body: &[u8]) -> Result<(), Refusal> {
    let envelope = envelope();
    spool
        .hold(ToHold {
            id,
            key: key(k),
            envelope: &envelope,
            origin: origin(),
            received: b"Received: from x\r\n",
            key_fields: b"",
            body,
            max_held: Some(100),
            report: false,
        })
        .await
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(TokioClock::new())
}

/// A held message is in `held/` when `hold` returns, and a restart reads it back with its
/// key, its order and its age; the bytes come back whole.
#[tokio::test(start_paused = true)]
async fn held_messages_come_back_after_a_restart_in_order_with_their_age() {
    let dir = scratch("restart");
    // One clock for both runs: paused time moves it, not the system's wall clock.
    let clock = clock();
    let spool = Spool::open(&config(&dir), clock.clone()).unwrap();
    hold(
        &spool,
        "aaaa000000000001",
        "acme",
        b"Subject: 1\r\n\r\none\r\n",
    )
    .await
    .unwrap();
    tokio::time::advance(Duration::from_secs(60)).await;
    hold(
        &spool,
        "aaaa000000000002",
        "acme",
        b"Subject: 2\r\n\r\ntwo\r\n",
    )
    .await
    .unwrap();
    hold(&spool, "bbbb000000000001", "other", b"x\r\n")
        .await
        .unwrap();
    assert_eq!(std::fs::read_dir(dir.join("held")).unwrap().count(), 3);
    let first_age = spool.summary().oldest_ms;
    assert_eq!(first_age, 60_000);
    drop(spool);

    tokio::time::advance(Duration::from_secs(5)).await;
    let spool = Spool::open(&config(&dir), clock).unwrap();
    assert_eq!(spool.summary().messages, 3);
    assert_eq!(
        spool.summary().oldest_ms,
        65_000,
        "age kept across the restart"
    );
    assert!(spool.holds(&key("acme")) && spool.holds(&key("other")));
    let taken = spool.take_due(10);
    let ids: Vec<&str> = taken.iter().map(|t| &*t.id).collect();
    assert_eq!(ids, ["aaaa000000000001", "bbbb000000000001"]);
    let first = spool.read(&taken[0]).await.unwrap();
    assert_eq!(first.body(), b"Subject: 1\r\n\r\none\r\n");
    assert_eq!(first.received(), b"Received: from x\r\n");
    assert_eq!(first.meta.origin, origin());
    assert_eq!(first.meta.envelope(), envelope());
    assert!(spool.remove("aaaa000000000001").await);
    assert_eq!(&*spool.take_due(10)[0].id, "aaaa000000000002");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file damaged on disk is set aside (at start, or when it is read for release) and the
/// rest of the spool goes on; a half-written file in `tmp/` is removed.
#[tokio::test]
async fn damaged_files_are_set_aside_and_the_rest_kept() {
    let dir = scratch("damaged");
    let spool = Spool::open(&config(&dir), clock()).unwrap();
    for id in ["c000000000000001", "c000000000000002", "c000000000000003"] {
        hold(&spool, id, "acme", b"body\r\n").await.unwrap();
    }
    drop(spool);
    let held: Vec<_> = std::fs::read_dir(dir.join("held"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let by_id = |id: &str| {
        held.iter()
            .find(|p| p.to_string_lossy().ends_with(id))
            .unwrap()
    };
    // One unreadable meta, one flipped body byte, and a half-written file in tmp/.
    std::fs::write(
        by_id("c000000000000001"),
        b"mailsluice-spool 1 00\n{not json\n",
    )
    .unwrap();
    let second = by_id("c000000000000002");
    let mut bytes = std::fs::read(second).unwrap();
    *bytes.last_mut().unwrap() ^= 0x20;
    std::fs::write(second, bytes).unwrap();
    std::fs::write(dir.join("tmp/0000000000000009-c000000000000009"), b"half").unwrap();

    let spool = Spool::open(&config(&dir), clock()).unwrap();
    assert_eq!(
        spool.summary().messages,
        2,
        "the unreadable one is set aside at start"
    );
    assert_eq!(std::fs::read_dir(dir.join("damaged")).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(dir.join("tmp")).unwrap().count(), 0);
    let ticket = spool.take_due(1).remove(0);
    assert_eq!(&*ticket.id, "c000000000000002");
    let Unread::Damaged(err) = spool.read(&ticket).await.err().unwrap() else {
        panic!("damaged")
    };
    assert!(err.0.contains("digest"), "{err}");
    spool.set_aside(&ticket, &err.0).await;
    assert_eq!(std::fs::read_dir(dir.join("damaged")).unwrap().count(), 2);
    assert_eq!(&*spool.take_due(1)[0].id, "c000000000000003");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `max_bytes` and `min_free_bytes` refuse a message, which leaves nothing behind; what was
/// held stays. (One key may take all of the spool here: `max_key_share = 1.0`.)
#[tokio::test]
async fn storage_bounds_refuse_and_leave_nothing_behind() {
    let dir = scratch("bounds");
    let mut cfg = config(&dir);
    cfg.max_bytes = 100;
    cfg.max_key_share = toml::Spanned::new(0..0, 1.0);
    let spool = Spool::open(&cfg, clock()).unwrap();
    hold(&spool, "d000000000000001", "acme", &[b'x'; 50])
        .await
        .unwrap();
    assert_eq!(
        hold(&spool, "d000000000000002", "acme", &[b'x'; 50]).await,
        Err(Refusal::Storage(Storage::MaxBytes { max: 100 }))
    );
    drop(spool);
    cfg.max_bytes = u64::MAX;
    cfg.min_free_bytes = u64::MAX / 2;
    let spool = Spool::open(&cfg, clock()).unwrap();
    let refused = hold(&spool, "d000000000000003", "acme", b"x").await;
    assert!(
        matches!(refused, Err(Refusal::Storage(Storage::MinFree { .. }))),
        "{refused:?}"
    );
    assert_eq!(spool.summary().messages, 1);
    assert_eq!(std::fs::read_dir(dir.join("held")).unwrap().count(), 1);
    assert!(spool.writable().await, "a bound is not unwritability");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spool that cannot be written refuses, says so until it can be written again, and keeps
/// what it holds.
#[tokio::test]
async fn an_unwritable_spool_refuses_and_comes_back() {
    let dir = scratch("unwritable");
    let spool = Spool::open(&config(&dir), clock()).unwrap();
    hold(&spool, "e000000000000001", "acme", b"kept\r\n")
        .await
        .unwrap();
    // `tmp/` replaced by a file: nothing can be created in it (root ignores permissions).
    std::fs::remove_dir(dir.join("tmp")).unwrap();
    std::fs::write(dir.join("tmp"), b"").unwrap();
    let refused = hold(&spool, "e000000000000002", "acme", b"x").await;
    assert!(
        matches!(refused, Err(Refusal::Storage(Storage::Unwritable(_)))),
        "{refused:?}"
    );
    assert!(!spool.writable().await);
    std::fs::remove_file(dir.join("tmp")).unwrap();
    std::fs::create_dir(dir.join("tmp")).unwrap();
    assert!(spool.writable().await);
    assert_eq!(spool.summary().messages, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A second spool on the same directory is refused, naming it.
#[tokio::test]
async fn one_process_per_directory() {
    let dir = scratch("lock");
    let spool = Spool::open(&config(&dir), clock()).unwrap();
    let err = Spool::open(&config(&dir), clock())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains(&dir.display().to_string()), "{err}");
    drop(spool);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `max_held` refuses the key's next message but not a report, nor another key's message.
#[tokio::test]
async fn max_held_bounds_one_key() {
    let dir = scratch("max-held");
    let spool = Spool::open(&config(&dir), clock()).unwrap();
    let envelope = envelope();
    let to_hold = |id: &'static str, k: &str, max_held, report| ToHold {
        id,
        key: key(k),
        envelope: &envelope,
        origin: origin(),
        received: b"",
        key_fields: b"",
        body: b"x\r\n",
        max_held,
        report,
    };
    spool
        .hold(to_hold("f000000000000001", "a", Some(1), false))
        .await
        .unwrap();
    assert_eq!(
        spool
            .hold(to_hold("f000000000000002", "a", Some(1), false))
            .await,
        Err(Refusal::KeyFull { held: 1 })
    );
    spool
        .hold(to_hold("f000000000000003", "b", Some(1), false))
        .await
        .unwrap();
    spool
        .hold(to_hold("f000000000000004", "a", None, true))
        .await
        .unwrap();
    assert_eq!(spool.summary().messages, 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `250` rests on two syncs before `hold` returns: the file's data, before its rename
/// into `held/` (else the name could survive a crash with its data lost), and `held/`
/// itself, begun after that rename (else the name could be lost).
#[tokio::test]
async fn hold_returns_after_the_file_and_its_directory_are_synced() {
    use sync_log::Step;
    let dir = scratch("synced");
    let spool = Spool::open(&config(&dir), clock()).unwrap();
    hold(&spool, "f000000000000001", "acme", b"durable\r\n")
        .await
        .unwrap();
    let steps = sync_log::under(&dir);
    let held = dir.join("held");
    let entry = std::fs::read_dir(&held)
        .unwrap()
        .next()
        .expect("one file held");
    let name = entry.unwrap().file_name();
    let at = |want: &Step| steps.iter().position(|s| s == want);
    let file = at(&Step::File(dir.join("tmp").join(&name)));
    let renamed = at(&Step::Renamed(held.join(&name))).expect("renamed into held/");
    assert!(
        file.is_some_and(|f| f < renamed),
        "the file synced before its rename: {steps:?}"
    );
    let begun = (steps.iter().enumerate())
        .position(|(i, s)| i > renamed && *s == Step::DirBegun(held.clone()));
    let synced = begun.and_then(|b| {
        (steps.iter().enumerate()).position(|(i, s)| i > b && *s == Step::DirSynced(held.clone()))
    });
    assert!(
        synced.is_some(),
        "held/ synced by a sync begun after the rename: {steps:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
