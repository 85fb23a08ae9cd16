//! FileForwarder: a reader of the directory only ever sees complete pairs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mailsluice::upstream::{FileForwarder, Forwarder, UpstreamError};

use super::{envelope, SIMPLE};
use crate::support::host::scratch_path;

/// A fresh directory under the system temp dir, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        Scratch(scratch_path(name))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == ext))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

#[tokio::test]
async fn writes_message_and_envelope_creating_the_dir() {
    let scratch = Scratch::new("file");
    let dir = scratch.0.join("nested/outbox");
    let fwd = FileForwarder::new(&dir);
    let mut env = envelope(None, &["b@y.test", "c@z.test"]);
    env.smtputf8 = true;
    let accepted = fwd.forward(&env, SIMPLE).await.unwrap();
    let id = accepted.text.strip_prefix("2.0.0 Ok: queued as ").unwrap();

    assert_eq!(
        std::fs::read(dir.join(format!("{id}.eml"))).unwrap(),
        SIMPLE
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(format!("{id}.json"))).unwrap()).unwrap();
    assert_eq!(json["from"], serde_json::Value::Null);
    assert_eq!(json["rcpts"], serde_json::json!(["b@y.test", "c@z.test"]));
    assert_eq!(json["smtputf8"], true);
    assert_eq!(json["body_8bit"], false);
    let at = json["received_at"].as_str().unwrap();
    assert!(
        at.len() == 24 && at.ends_with('Z') && at.as_bytes()[10] == b'T',
        "{at}"
    );

    let all: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(all.len(), 2, "no temporary files left behind");
}

#[tokio::test]
async fn sender_is_recorded() {
    let scratch = Scratch::new("sender");
    let fwd = FileForwarder::new(&scratch.0);
    fwd.forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
        .unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files(&scratch.0, "json")[0]).unwrap()).unwrap();
    assert_eq!(json["from"], "a@x.test");
}

#[tokio::test]
async fn concurrent_writes_give_distinct_files() {
    let scratch = Scratch::new("concurrent");
    let fwd = Arc::new(FileForwarder::new(&scratch.0));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let fwd = Arc::clone(&fwd);
            tokio::spawn(async move {
                let body = format!("Subject: {i}\r\n\r\nbody {i}\r\n");
                let accepted = fwd
                    .forward(&envelope(Some("a@x.test"), &["b@y.test"]), body.as_bytes())
                    .await
                    .unwrap();
                (accepted.text, body)
            })
        })
        .collect();
    let mut ids = HashMap::new();
    for task in tasks {
        let (text, body) = task.await.unwrap();
        let id = text.rsplit(' ').next().unwrap().to_string();
        assert!(ids.insert(id, body).is_none(), "duplicate id");
    }
    assert_eq!(files(&scratch.0, "eml").len(), 40);
    assert_eq!(files(&scratch.0, "json").len(), 40);
    for (id, body) in ids {
        let got = std::fs::read(scratch.0.join(format!("{id}.eml"))).unwrap();
        assert_eq!(got, body.as_bytes());
    }
}

/// A reader polling the directory, as a delivery script would, while large messages are
/// being written: every `.eml` it finds has its `.json`, and is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_reader_never_sees_a_partial_message() {
    let scratch = Scratch::new("reader");
    std::fs::create_dir_all(&scratch.0).unwrap();
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..12)
            .map(|i| {
                let mut body = format!("Subject: {i}\r\n\r\n").into_bytes();
                body.resize(body.len() + 512 * 1024, b'a' + i as u8);
                body.extend_from_slice(b"\r\n");
                body
            })
            .collect(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (dir, bodies, done) = (scratch.0.clone(), Arc::clone(&bodies), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut checks = 0usize;
            loop {
                let finished = done.load(Ordering::SeqCst);
                for eml in files(&dir, "eml") {
                    assert!(
                        eml.with_extension("json").exists(),
                        "{eml:?} without envelope"
                    );
                    let got = std::fs::read(&eml).unwrap();
                    assert!(
                        bodies.contains(&got),
                        "{eml:?} is partial ({} bytes)",
                        got.len()
                    );
                    checks += 1;
                }
                if finished {
                    return checks;
                }
            }
        })
    };
    let fwd = FileForwarder::new(&scratch.0);
    for body in bodies.iter() {
        fwd.forward(&envelope(Some("a@x.test"), &["b@y.test"]), body)
            .await
            .unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let checks = reader.join().expect("reader saw a partial message");
    assert!(checks >= 12);
    assert_eq!(files(&scratch.0, "eml").len(), 12);
}

#[tokio::test]
async fn unwritable_directory_is_unavailable() {
    let scratch = Scratch::new("unwritable");
    std::fs::create_dir_all(&scratch.0).unwrap();
    let not_a_dir = scratch.0.join("plain-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let fwd = FileForwarder::new(not_a_dir.join("outbox"));
    let err = fwd
        .forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Unavailable(_)), "{err:?}");
}
