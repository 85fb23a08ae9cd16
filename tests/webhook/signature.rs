//! The signature as a receiver checks it: docs/webhooks.md's own Python check, run on a real
//! delivery, takes it, and refuses it once its timestamp is older than the tolerance (a
//! replay), or its body changed, or the secret is another.

use std::time::Duration;

use crate::support::clock::{hold, until_held};
use crate::support::host::{have_program, scratch_path};
use crate::support::webhook::{verified, Delivery, Receiver};
use crate::{message, relay, SECRET, SECRET_ENV};

/// The Python block of docs/webhooks.md's "The signature".
fn documented_check() -> String {
    let page = std::fs::read_to_string("docs/webhooks.md").unwrap();
    let start = page.find("```python\n").expect("a Python block") + "```python\n".len();
    let end = start + page[start..].find("```").unwrap();
    page[start..end].to_string()
}

/// What the documented check says of `delivery` at `now`, run by python3.
fn python_verdict(delivery: &Delivery, secret: &str, body: &[u8], now: u64) -> bool {
    let dir = scratch_path("webhook-check");
    std::fs::create_dir_all(&dir).unwrap();
    let body_path = dir.join("body.json");
    std::fs::write(&body_path, body).unwrap();
    let script = format!(
        "{}\nimport sys\nbody = open(sys.argv[1], 'rb').read()\n\
         print(verified(sys.argv[2].encode(), sys.argv[3], body, now=int(sys.argv[4])))\n",
        documented_check()
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&body_path)
        .arg(secret)
        .arg(&delivery.signature)
        .arg(now.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match String::from_utf8_lossy(&out.stdout).trim() {
        "True" => true,
        "False" => false,
        other => panic!("the check printed {other}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_documented_check_takes_a_delivery_and_refuses_its_replay() {
    let receiver = Receiver::start().await;
    let relay = relay(&receiver.config("acme", SECRET_ENV, "events = [\"accepted\"]")).await;
    let held = hold();
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(
        c.send_mail("a@acme.example", &["b@example.com"], &message("acme"))
            .await
            .0,
        250
    );
    until_held("a delivery", || !receiver.deliveries().is_empty()).await;
    drop(held);
    let delivery = receiver.deliveries().remove(0);
    let clock = relay.services().clock.clone();
    let now = clock.unix_now_secs();
    assert!(verified(
        SECRET.as_bytes(),
        &delivery.signature,
        &delivery.body,
        300,
        now
    ));
    let mut tampered = delivery.body.clone();
    tampered[0] = b' ';
    assert!(!verified(
        SECRET.as_bytes(),
        &delivery.signature,
        &tampered,
        300,
        now
    ));
    assert!(!verified(
        b"another secret",
        &delivery.signature,
        &delivery.body,
        300,
        now
    ));
    // The same request played again ten minutes later.
    tokio::time::advance(Duration::from_secs(600)).await;
    let later = clock.unix_now_secs();
    assert!(!verified(
        SECRET.as_bytes(),
        &delivery.signature,
        &delivery.body,
        300,
        later
    ));

    if !have_program("python3") {
        return;
    }
    assert!(python_verdict(&delivery, SECRET, &delivery.body, now));
    assert!(
        !python_verdict(&delivery, SECRET, &delivery.body, later),
        "a replay taken"
    );
    assert!(!python_verdict(&delivery, SECRET, &tampered, now));
    assert!(!python_verdict(
        &delivery,
        "another secret",
        &delivery.body,
        now
    ));
    relay.stop().await;
}
