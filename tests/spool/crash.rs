//! The binary as a process of its own, on a real clock: SIGKILL while messages are held and
//! being released, a full filesystem (a small tmpfs), a second process on the same spool.
//! No timed assertions: each waits for what it needs (at most 30 s) and checks what arrived.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use crate::support::host::{have_programs, scratch_path};
use crate::support::process::{bin, RelayProcess};
use crate::support::relay::{config_text, Client};
use crate::support::upstream::{Fault, Step, TestUpstream};
use crate::support::wait::until;

/// A relay forwarding to `up` over plain SMTP, with a hold layer and the spool in `dir`.
fn config(up: &TestUpstream, layer: &str, dir: &Path, spool: &str) -> String {
    let rest = format!("tls = \"none\"\n{layer}{}", spool_section(dir, spool));
    config_text(&up.url(), "", &rest)
}

/// The subjects upstream got, each with how many times.
fn arrivals(up: &TestUpstream) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for m in up.messages() {
        *seen.entry(subject(&m.data)).or_default() += 1;
    }
    seen
}

/// Each of `tenants` sends `n` messages on its own connection, one after the other, never
/// retrying; the subjects answered `250`.
async fn burst(relay: &RelayProcess, tenants: &[&str], n: usize) -> Vec<String> {
    let sends = tenants.iter().map(|tenant| {
        let (addr, tenant) = (relay.addr, tenant.to_string());
        tokio::spawn(async move {
            let mut c = Client::connect(addr).await;
            let mut accepted = Vec::new();
            for i in 0..n {
                let subject = format!("{tenant}-{i:03}");
                let msg = message(&tenant, &subject);
                let (code, text) = c.send_mail("a@example.com", &["u@example.net"], &msg).await;
                match code {
                    250 => accepted.push(subject),
                    _ => return (accepted, Some((code, text))),
                }
            }
            (accepted, None)
        })
    });
    let mut accepted = Vec::new();
    for send in sends.collect::<Vec<_>>() {
        let (got, refused) = send.await.unwrap();
        assert_eq!(refused, None, "every message of this burst is answered 250");
        accepted.extend(got);
    }
    accepted
}

/// SIGKILL with messages held and some with upstream (which takes 300 ms to answer each;
/// the layer lets two a second go, so after the first each tenant's messages are held),
/// then a restart on the same spool: every message that got `250` reaches upstream, in its
/// key's order; a message is there twice only if it was with upstream at the kill (one per
/// key at most: four).
#[tokio::test]
async fn sigkill_while_held_and_releasing_then_restart_every_250_reaches_upstream() {
    let up = TestUpstream::start().await;
    up.set_fault(Fault::stall(Step::EndOfData, Duration::from_millis(300)));
    let dir = scratch_path("spool-crash");
    let layer = hold_layer(2, 1, 0, "");
    let text = config(&up, &layer, &dir, "");
    let relay = RelayProcess::start(&text, "info");
    let tenants = ["t1", "t2", "t3", "t4"];
    let accepted = burst(&relay, &tenants, 15).await;
    assert_eq!(accepted.len(), 60);
    until("some released", async || up.messages().len() >= 8).await;
    relay.signal(libc::SIGKILL);
    let mut relay = relay;
    relay.reap();
    let before = up.messages().len();
    assert!(
        before < 60,
        "killed with messages still held ({before} upstream)"
    );
    up.set_fault(Fault::None);

    let restarted = RelayProcess::start(&text, "info");
    restarted.wait_for_log("spool opened").await;
    until("every 250 upstream", async || {
        accepted.iter().all(|s| arrivals(&up).contains_key(s))
    })
    .await;
    until("the spool empty", async || files(&dir, "held") == 0).await;
    let seen = arrivals(&up);
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    assert!(
        duplicates <= tenants.len(),
        "{duplicates} duplicates: {seen:?}"
    );
    eprintln!("killed with {before} of 60 upstream; {duplicates} sent twice");
    assert_eq!(seen.len(), 60, "nothing upstream that was not answered 250");
    for tenant in tenants {
        let mut firsts = Vec::new();
        for m in up.messages() {
            let s = subject(&m.data);
            if s.starts_with(tenant) && !firsts.contains(&s) {
                firsts.push(s);
            }
        }
        let mut sorted = firsts.clone();
        sorted.sort();
        assert_eq!(firsts, sorted, "{tenant}'s messages in the order they came");
    }
    drop(restarted);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A full filesystem (a tmpfs of 512 KiB, mounted in a mount namespace of the relay's own):
/// `452 4.3.1`, and every message held before it reaches upstream.
#[tokio::test]
async fn a_full_filesystem_gives_452_and_loses_nothing_held() {
    if !have_programs(&["unshare", "mount"], "util-linux mount") {
        return;
    }
    let up = TestUpstream::start().await;
    let dir = scratch_path("spool-tmpfs");
    std::fs::create_dir_all(&dir).unwrap();
    let text = config(&up, &hold_layer(2, 1, 0, ""), &dir, "");
    let mount = "mount -t tmpfs -o size=512k tmpfs \"$0\" && exec \"$@\"";
    let dir_arg = dir.display().to_string();
    let wrapper = ["unshare", "-rm", "sh", "-c", mount, &dir_arg];
    let relay = RelayProcess::start_with(&text, "info", &wrapper);
    // 40 KiB a message: a dozen fill the tmpfs long before two a second leave it.
    let mut c = Client::connect(relay.addr).await;
    let mut accepted = Vec::new();
    let mut refusal = None;
    for i in 0..100 {
        let subject = format!("m{i:03}");
        let mut msg = message("acme", &subject);
        for _ in 0..40 {
            msg.extend(std::iter::repeat_n(b'x', 1022).chain(*b"\r\n"));
        }
        let (code, text) = c.send_mail("a@example.com", &["u@example.net"], &msg).await;
        match code {
            250 => accepted.push(subject),
            _ => {
                refusal = Some((code, text));
                break;
            }
        }
    }
    assert_eq!(
        refusal,
        Some((
            452,
            "4.3.1 Insufficient system storage, try again later".into()
        )),
        "after {} accepted",
        accepted.len()
    );
    assert!(
        accepted.len() >= 5,
        "{} held before the disk was full",
        accepted.len()
    );
    until("every 250 upstream", async || {
        accepted.iter().all(|s| arrivals(&up).contains_key(s))
    })
    .await;
    assert_eq!(
        up.messages().len(),
        accepted.len(),
        "each once, nothing else"
    );
    drop(relay);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One relay process per spool directory: a second one on the same directory does not
/// start, and says which directory and who holds it.
#[tokio::test]
async fn a_second_process_on_the_same_spool_refuses_to_start_naming_it() {
    let up = TestUpstream::start().await;
    let dir = scratch_path("spool-twice");
    let text = config(&up, &hold_layer(1, 1, 0, ""), &dir, "");
    let first = RelayProcess::start(&text, "info");
    let path = dir.with_extension("toml");
    std::fs::write(&path, &text).unwrap();
    let second = std::process::Command::new(bin())
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("spool directory {} is in use", dir.display()))
            && stderr.contains(&format!("(pid {})", first.pid())),
        "{stderr}"
    );
    drop(first);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&dir);
}
