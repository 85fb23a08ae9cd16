//! Every injected upstream fault gives the right `UpstreamError`, and never `Ok`.

use std::time::Duration;

use mailsluice::upstream::{Forwarder, UpstreamError};

use super::{envelope, smtp_forwarder, SIMPLE};
use crate::support::upstream::{refusing_addr, Fault, Step, TestUpstream, ALL_STEPS};

async fn send(fwd: &impl Forwarder) -> Result<mailsluice::upstream::Accepted, UpstreamError> {
    fwd.forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
}

fn assert_unavailable(result: Result<mailsluice::upstream::Accepted, UpstreamError>, what: &str) {
    assert!(
        matches!(result, Err(UpstreamError::Unavailable(_))),
        "{what}: {result:?}"
    );
}

/// The message was sent whole and no answer came: upstream may have it.
fn assert_uncertain(result: Result<mailsluice::upstream::Accepted, UpstreamError>, what: &str) {
    assert!(
        matches!(result, Err(UpstreamError::Uncertain(_))),
        "{what}: {result:?}"
    );
}

#[tokio::test]
async fn nobody_listening_is_unavailable() {
    let refusing = refusing_addr();
    let fwd = smtp_forwarder(&format!("smtp://{}", refusing.addr()), "");
    assert_unavailable(send(&fwd).await, "refused");
}

#[tokio::test]
async fn upstream_that_stops_listening_is_unavailable() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    up.stop_listening().await;
    assert_unavailable(send(&fwd).await, "stopped");
}

#[tokio::test]
async fn connection_closed_at_once_is_unavailable() {
    let up = TestUpstream::start().await;
    up.set_fault(Fault::CloseOnConnect);
    let fwd = smtp_forwarder(&up.url(), "");
    assert_unavailable(send(&fwd).await, "closed on connect");
    assert!(up.connections() >= 1);
}

#[tokio::test]
async fn negative_replies_keep_code_and_text_at_every_step() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    for step in ALL_STEPS {
        for (code, text, enhanced, rest) in [
            (
                451,
                "4.3.0 try again later",
                Some("4.3.0"),
                "try again later",
            ),
            (554, "5.7.1 relay denied", Some("5.7.1"), "relay denied"),
            (450, "mailbox busy", None, "mailbox busy"),
        ] {
            up.set_fault(Fault::reply(step, code, text));
            let result = send(&fwd).await;
            assert_eq!(
                result,
                Err(UpstreamError::Rejected {
                    code,
                    enhanced: enhanced.map(str::to_string),
                    text: rest.to_string()
                }),
                "{step:?} {code}"
            );
        }
    }
    assert!(up.messages().is_empty());
    up.set_fault(Fault::None);
    send(&fwd).await.expect("recovers once upstream does");
}

#[tokio::test]
async fn dropped_mid_data_is_uncertain_and_not_retried() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    send(&fwd).await.unwrap(); // a pooled connection, so a retry would be tempting
    up.set_fault(Fault::DropMidData);
    // The body was written before the drop was seen: from here, upstream may have it.
    assert_uncertain(send(&fwd).await, "dropped mid-data");
    assert_eq!(up.messages().len(), 1);
    let datas = up.commands().iter().filter(|c| *c == "DATA").count();
    assert_eq!(datas, 2, "the body must not be sent twice");
}

#[tokio::test]
async fn stalls_before_the_body_are_unavailable_after_it_uncertain() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "timeout_ms = 300");
    for step in ALL_STEPS {
        up.set_fault(Fault::stall(step, Duration::from_secs(3)));
        let result = send(&fwd).await;
        match step {
            Step::EndOfData => assert_uncertain(result, "stall at the final reply"),
            _ => assert_unavailable(result, &format!("stall at {step:?}")),
        }
    }
}

/// A connection given up on mid-command must never serve again: its late replies would be
/// read as answers to the next message's commands.
#[tokio::test]
async fn a_timed_out_connection_is_never_reused() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "timeout_ms = 300");
    send(&fwd).await.unwrap();
    up.set_fault(Fault::stall(Step::EndOfData, Duration::from_millis(600)));
    assert_uncertain(send(&fwd).await, "stalled final reply");
    up.set_fault(Fault::None);
    let body = b"Subject: after the stall\r\n\r\n";
    let accepted = fwd
        .forward(&envelope(Some("a@x.test"), &["b@y.test"]), body)
        .await
        .expect("a fresh connection");
    let got = up.wait_for(3).await; // the stalled one is accepted late, as a real server may
    let pos = got.iter().position(|m| m.data == body).unwrap();
    assert_eq!(
        accepted.text,
        format!("2.0.0 Ok: queued as TEST{}", pos + 1)
    );
    assert_ne!(got[pos].conn, 1);
}
