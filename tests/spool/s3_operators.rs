//! The operators on the spool on S3 and SQS (`store = "s3"`), against moto's server: the
//! summary from the queue's count and the bucket's listing, the messages listed with their
//! keys from their objects, one message, one removed (its entry then dropped, never sent),
//! failed messages put back, 409 for releasing now and stopping a key (the endpoint and
//! `mailsluice spool`), `/readyz` while S3 refuses writes and after, and `mailsluice check`
//! naming a bucket that does not exist. The bucket and queue: `s3_store::Store`'s.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::s3_store::{wait_until, Gate, Store, BUCKET};
use crate::support::auth::cheap_hash;
use crate::support::host::scratch_path;
use crate::support::http::request;
use crate::support::relay::{config_text, Relay};

const BIN: &str = env!("CARGO_BIN_EXE_mailsluice");
const SEC: Duration = Duration::from_secs(1);
const PASSWORD: &str = "s3cret";
const PW: Option<&str> = Some(PASSWORD);

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The id in `250 2.0.0 Ok: queued as <id> (held for later delivery)`.
fn queued_id(text: &str) -> String {
    let rest = text.split("queued as ").nth(1).expect("a held reply");
    rest.split_whitespace().next().unwrap().to_string()
}

/// A relay holding with one message a second (burst 1, no wait) on `store` with `extra` in
/// `[spool]`, an admin password, and `forwarder` as upstream; its admin endpoint.
async fn relay(
    store: &Store,
    extra: &str,
    forwarder: Arc<dyn mailsluice::upstream::Forwarder>,
) -> (Relay, SocketAddr) {
    let admin = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash(PASSWORD));
    let rest = hold_layer(1, 1, 0, "") + &store.section(extra) + &admin;
    let relay = Relay::start(&config_text("file://unused", "", &rest), forwarder).await;
    let admin = relay.start_admin().await;
    (relay, admin)
}

/// `mailsluice spool ARGS` against `admin`: its exit code and standard error.
async fn spool_command(admin: SocketAddr, args: &[&str]) -> (i32, String) {
    let mut command = Command::new(BIN);
    command.arg("spool").args(args);
    command.args(["--admin", &format!("http://{admin}")]);
    command.env("MAILSLUICE_ADMIN_PASSWORD", PASSWORD);
    command.env_remove("MAILSLUICE_CONFIG");
    let out = tokio::task::spawn_blocking(move || command.output().unwrap());
    let out = out.await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr)
}

/// Four held messages on S3 and SQS, one received by this relay and kept with upstream
/// (`receive_max = 1`), the others in the queue: the summary counts them, the lists show them
/// with their key, one is shown, one removed is never sent.
#[tokio::test]
async fn operators_read_and_remove_messages_of_the_shared_spool() {
    let Some(store) = Store::start().await else {
        return;
    };
    let gate = Arc::new(Gate::default());
    let (relay, admin) = relay(&store, "receive_max = 1", gate.clone()).await;
    let mut c = relay.memory_client().await;
    let mut ids = Vec::new();
    for (n, subject) in ["m0", "slow", "slow", "slow", "slow"].iter().enumerate() {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["user@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{subject}: {text}");
        if n > 0 {
            ids.push(queued_id(&text));
        }
    }
    wait_until(
        "one with upstream, three in the queue",
        60 * SEC,
        || async { gate.waiting.load(Ordering::Relaxed) == 1 && store.entries().await == (3, 1) },
    )
    .await;

    // The summary: the queue's count (read every 5 s), the bucket's listing.
    let started = std::time::Instant::now();
    let summary = loop {
        let (status, body) = request(admin, "GET", "/spool", PW).await;
        assert_eq!(status, 200, "{body}");
        let summary = json(&body);
        if summary["messages"] == 4 {
            break summary;
        }
        assert!(started.elapsed() <= 30 * SEC, "never counted 4: {body}");
        tokio::time::sleep(SEC / 10).await;
    };
    assert_eq!(summary["failed"], 0, "{summary}");
    assert!(summary["bytes"].as_u64().unwrap() > 4 * 40, "{summary}");
    assert_eq!(
        summary["keys"][0]["key"], "acme",
        "received here: {summary}"
    );
    assert_eq!(relay.metric("mailsluice_spool_messages"), 4.0);

    // Listed from the bucket, each with its key read from its object's head.
    let (status, body) = request(admin, "GET", "/spool/messages", PW).await;
    let listed = json(&body);
    assert_eq!((status, &listed["total"]), (200, &4.into()), "{body}");
    let messages = listed["messages"].as_array().unwrap();
    let mut listed_ids: Vec<&str> = messages.iter().map(|m| m["id"].as_str().unwrap()).collect();
    listed_ids.sort();
    let mut held_ids: Vec<&str> = ids.iter().map(|id| &**id).collect();
    held_ids.sort();
    assert_eq!(listed_ids, held_ids);
    assert!(messages
        .iter()
        .all(|m| m["layer"] == "tenant" && m["key"] == "acme"));
    let state = |state: &str| messages.iter().filter(|m| m["state"] == state).count();
    assert_eq!((state("releasing"), state("held")), (1, 3), "{body}");
    let releasing = messages.iter().find(|m| m["state"] == "releasing").unwrap();
    let releasing = releasing["id"].as_str().unwrap().to_string();
    let waiting = messages.iter().find(|m| m["state"] == "held").unwrap();
    let waiting = waiting["id"].as_str().unwrap().to_string();
    let (_, body) = request(admin, "GET", "/spool/keys/tenant/acme/messages", PW).await;
    assert_eq!(json(&body)["total"], 4, "{body}");
    let (_, body) = request(admin, "GET", "/spool/keys/tenant/other/messages", PW).await;
    assert_eq!(json(&body)["total"], 0, "{body}");

    let (status, body) = request(admin, "GET", &format!("/spool/{waiting}"), PW).await;
    let one = json(&body);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&one["state"], &one["from"], &one["rcpts"][0]),
        (
            &"held".into(),
            &"app@acme.example".into(),
            &"user@example.net".into()
        )
    );

    // The one with upstream stays; a waiting one is removed: its object deleted.
    let (status, body) = request(admin, "DELETE", &format!("/spool/{releasing}"), PW).await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = request(admin, "DELETE", &format!("/spool/{waiting}"), PW).await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = request(admin, "GET", &format!("/spool/{waiting}"), PW).await;
    assert_eq!(status, 404);
    assert_eq!(store.objects("mailsluice/held/").await.len(), 3);

    // The status page shows the shared spool's counts.
    let (_, page) = request(admin, "GET", "/", PW).await;
    let section = page
        .split("<h2>Spool</h2>")
        .nth(1)
        .expect("a spool section");
    assert!(
        section.starts_with("<p>4 messages held on S3 and SQS"),
        "{section}"
    );

    // Let go: the three left go upstream; the removed one's entry is dropped, never sent.
    gate.open.store(true, Ordering::Relaxed);
    wait_until("nothing left held", 60 * SEC, || async {
        store.objects("mailsluice/").await.is_empty() && store.entries().await == (0, 0)
    })
    .await;
    let got = gate.got.lock().unwrap().clone();
    assert_eq!(
        got,
        ["m0", "slow", "slow", "slow"],
        "the removed one never sent"
    );
    relay.stop().await;
}

/// Releasing now (one message, every key's) and stopping or letting go a key are refused 409
/// with this store, saying why; `mailsluice spool` prints it and exits 1.
#[tokio::test]
async fn release_now_and_a_keys_hold_are_refused_409() {
    let Some(store) = Store::start().await else {
        return;
    };
    let gate = Arc::new(Gate::default());
    let (relay, admin) = relay(&store, "", gate.clone()).await;
    let mut c = relay.memory_client().await;
    let mut held = String::new();
    for subject in ["m0", "slow", "slow"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["user@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{subject}: {text}");
        if subject == "slow" {
            held = queued_id(&text);
        }
    }
    let waiting = held;
    // Not with this store: a 409 saying why, and the command prints it and fails.
    for (method, path) in [
        ("POST", format!("/spool/{waiting}/release")),
        ("POST", "/spool/release".to_string()),
        ("POST", "/spool/keys/tenant/acme/hold".to_string()),
        ("POST", "/spool/keys/tenant/acme/release".to_string()),
    ] {
        let (status, body) = request(admin, method, &path, PW).await;
        assert_eq!(status, 409, "{method} {path}: {body}");
        let error = json(&body)["error"].as_str().unwrap().to_string();
        assert!(
            error.starts_with("not with spool.store = \"s3\": "),
            "{error}"
        );
    }
    let (code, stderr) = spool_command(admin, &["hold", "tenant/acme"]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("409: not with spool.store = \"s3\""),
        "{stderr}"
    );
    let (code, stderr) = spool_command(admin, &["release", &waiting]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not with spool.store = \"s3\""), "{stderr}");

    gate.open.store(true, Ordering::Relaxed);
    relay.stop().await;
}

/// Messages refused for good with no `report_from` are copied to `failed/`: counted and
/// listed as failed; one put back by its id and the rest all at once, each delivered then.
#[tokio::test]
async fn failed_messages_are_put_back_and_delivered() {
    let Some(store) = Store::start().await else {
        return;
    };
    let fwd = Refusing::new(&["gone@example.net"]);
    let (relay, admin) = relay(&store, "", fwd.clone()).await;
    let mut c = relay.memory_client().await;
    let mut ids = Vec::new();
    for (rcpt, subject) in [
        ("user@example.net", "m0"),
        ("gone@example.net", "f1"),
        ("gone@example.net", "f2"),
    ] {
        let (code, text) = c
            .send_mail("app@acme.example", &[rcpt], &message("acme", subject))
            .await;
        assert_eq!(code, 250, "{subject}: {text}");
        if subject != "m0" {
            ids.push(queued_id(&text));
        }
    }
    wait_until("both failed", 60 * SEC, || async {
        store.objects("mailsluice/failed/").await.len() == 2
            && store.objects("mailsluice/held/").await.is_empty()
    })
    .await;
    let (_, body) = request(admin, "GET", "/spool", PW).await;
    assert_eq!(json(&body)["failed"], 2, "{body}");
    let (_, body) = request(admin, "GET", "/spool/messages?failed", PW).await;
    let listed = json(&body);
    let states: Vec<&Value> = (listed["messages"].as_array().unwrap().iter())
        .map(|m| &m["state"])
        .collect();
    assert_eq!(states, ["failed", "failed"], "{body}");
    let (_, body) = request(admin, "GET", &format!("/spool/{}", ids[0]), PW).await;
    assert_eq!(json(&body)["state"], "failed", "{body}");

    fwd.refused.lock().unwrap().clear();
    let (status, body) = request(admin, "POST", &format!("/spool/{}/requeue", ids[0]), PW).await;
    assert_eq!(
        (status, json(&body)["requeued"].clone()),
        (200, 1.into()),
        "{body}"
    );
    let (status, _) = request(admin, "POST", "/spool/nosuchmessage/requeue", PW).await;
    assert_eq!(status, 404);
    wait_until("f1 delivered", 60 * SEC, || {
        let n = fwd.messages().len();
        async move { n == 2 }
    })
    .await;
    let (status, body) = request(admin, "POST", "/spool/requeue", PW).await;
    assert_eq!(
        (status, json(&body)["requeued"].clone()),
        (200, 1.into()),
        "{body}"
    );
    wait_until("f2 delivered", 60 * SEC, || {
        let n = fwd.messages().len();
        async move { n == 3 }
    })
    .await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject(m)).collect();
    assert_eq!(subjects, ["m0", "f1", "f2"]);
    wait_until("nothing left", 30 * SEC, || async {
        store.objects("mailsluice/").await.is_empty() && store.entries().await == (0, 0)
    })
    .await;
    relay.stop().await;
}

/// While S3 refuses writes (its bucket gone) a message to hold gets `452` and `/readyz` 503
/// (its probe fails); once the bucket is back the probe passes and `/readyz` is 200 again,
/// its probe object deleted.
#[tokio::test]
async fn readyz_fails_while_s3_refuses_writes_and_comes_back() {
    let Some(store) = Store::start().await else {
        return;
    };
    let fwd = Refusing::new(&[]);
    let (relay, admin) = relay(&store, "", fwd.clone()).await;
    let (status, body) = request(admin, "GET", "/readyz", PW).await;
    assert_eq!(status, 200, "{body}");
    store
        .s3
        .delete_bucket()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    let mut c = relay.memory_client().await;
    let mut replies = Vec::new();
    for subject in ["m0", "m1"] {
        let msg = message("acme", subject);
        replies.push(
            c.send_mail("app@acme.example", &["u@example.net"], &msg)
                .await,
        );
    }
    assert_eq!(replies[1].0, 452, "{replies:?}");
    assert!(replies[1].1.contains("4.3.1"), "{replies:?}");
    let (status, body) = request(admin, "GET", "/readyz", PW).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(json(&body)["spool"]["ok"], false, "{body}");
    store
        .s3
        .create_bucket()
        .bucket(BUCKET)
        .send()
        .await
        .unwrap();
    let (status, body) = request(admin, "GET", "/readyz", PW).await;
    assert_eq!(status, 200, "{body}");
    assert!(store.objects("mailsluice/probe/").await.is_empty());
    relay.stop().await;
}

/// `mailsluice check` with `store = "s3"` writes a probe object: it fails naming a bucket that
/// does not exist, and passes (leaving nothing) on one that does.
#[tokio::test]
async fn check_names_a_bucket_that_does_not_exist() {
    let Some(store) = Store::start().await else {
        return;
    };
    let dir = scratch_path("spool-s3-check");
    std::fs::create_dir_all(&dir).unwrap();
    let check = |name: &str, section: String| {
        let path = dir.join(format!("{name}.toml"));
        let text = config_text("file://unused", "", &(hold_layer(1, 1, 0, "") + &section));
        std::fs::write(&path, text).unwrap();
        let mut command = Command::new(BIN);
        command.args(["check", "--config"]).arg(&path);
        for (name, value) in [
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_CONFIG_FILE", "/dev/null"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ] {
            command.env(name, value);
        }
        command
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN");
        tokio::task::spawn_blocking(move || command.output().unwrap())
    };
    let missing = store.section("").replace(BUCKET, "no-such-bucket");
    let out = check("missing", missing).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bucket no-such-bucket"), "{stderr}");
    let out = check("present", store.section("")).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        store.objects("mailsluice/").await.is_empty(),
        "the probe deleted"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
