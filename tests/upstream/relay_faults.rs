//! Every fault the test upstream can inject, seen by a client through the relay: the class
//! and text of upstream's answer are kept, an unreachable or silent upstream is `451 4.4.1`,
//! and never a `250`.

use std::time::Duration;

use crate::support::relay::smtp_relay;
use crate::support::upstream::{Fault, Step, TestUpstream, ALL_STEPS};

#[tokio::test]
async fn upstream_replies_keep_their_class_and_text() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    for step in ALL_STEPS {
        for (code, text) in [(451, "4.3.0 try later"), (554, "5.7.1 go away")] {
            up.set_fault(Fault::reply(step, code, text));
            let mut c = relay.client().await;
            let (got, reply) = c
                .send_mail(
                    "a@example.com",
                    &["b@example.net"],
                    b"Subject: f\r\n\r\nx\r\n",
                )
                .await;
            let label = format!("{step:?} {code}");
            assert_eq!(got / 100, code / 100, "{label}: {got} {reply}");
            assert!(
                reply.contains(text.split_once(' ').unwrap().1),
                "{label}: {reply}"
            );
            assert!(
                reply.starts_with(&text[..5]),
                "{label}: enhanced code kept: {reply}"
            );
        }
    }
    up.set_fault(Fault::None);
    assert!(up.messages().is_empty(), "nothing was accepted upstream");
    relay.stop().await;
}

#[tokio::test]
async fn unreachable_dropped_or_silent_upstream_is_451_4_4_1() {
    let up = TestUpstream::start().await;
    // The relay's upstream timeout is 2 s in tests; the stall outlasts it.
    let faults = [
        Fault::CloseOnConnect,
        Fault::DropMidData,
        Fault::stall(Step::Greeting, Duration::from_secs(5)),
        Fault::stall(Step::Rcpt, Duration::from_secs(5)),
    ];
    let relay = smtp_relay(&up.url(), "", "").await;
    for fault in faults {
        up.set_fault(fault.clone());
        let mut c = relay.client().await;
        let (code, text) = c
            .send_mail(
                "a@example.com",
                &["b@example.net"],
                b"Subject: f\r\n\r\nx\r\n",
            )
            .await;
        assert_eq!(code, 451, "{fault:?}: {text}");
        assert!(text.starts_with("4.4.1"), "{fault:?}: {text}");
    }
    up.stop_listening().await;
    let mut c = relay.client().await;
    let (code, _) = c
        .send_mail("a@example.com", &["b@example.net"], b"x\r\n")
        .await;
    assert_eq!(code, 451, "nothing listening upstream");
    assert!(up.messages().is_empty());
    relay.stop().await;
}

#[tokio::test]
async fn byte_exact_ten_mib_message_through_smtp() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    let mut body = b"Subject: big\r\n\r\n".to_vec();
    let line = b".starts with a dot and has 8-bit \xc3\xa9 bytes, then more text to fill\r\n";
    while body.len() < 10 * 1024 * 1024 {
        body.extend_from_slice(line);
    }
    let stuffed: Vec<u8> = {
        // Client-side dot-stuffing of every line starting with '.'.
        let mut out = Vec::with_capacity(body.len() + body.len() / 40);
        let mut at_line_start = true;
        for &b in &body {
            if at_line_start && b == b'.' {
                out.push(b'.');
            }
            out.push(b);
            at_line_start = b == b'\n';
        }
        out
    };
    let mut c = relay.client().await;
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.net"], &stuffed)
        .await;
    assert_eq!(code, 250, "{text}");
    let got = up.wait_for(1).await;
    let data = &got[0].data;
    assert!(data.starts_with(b"Received: "));
    assert!(
        data.ends_with(&body),
        "the client's bytes arrive unchanged after the Received header"
    );
    let header = String::from_utf8_lossy(&data[..data.len() - body.len()]).to_string();
    assert!(
        header.ends_with("\r\n") && !header.contains("\r\n\r\n"),
        "only a trace header was added: {header}"
    );
    assert!(
        header.lines().skip(1).all(|l| l.starts_with('\t')),
        "{header}"
    );
    relay.stop().await;
}

/// A message answered "may have been delivered" keeps its tokens: upstream may hold it (the
/// test upstream does, once its stall ends), so giving them back would let the client's retry,
/// or anyone's next message, past the limit. Here the layer holds one message a minute: the
/// retry is refused `451 4.7.1`, and upstream holds the message once.
#[tokio::test]
async fn an_uncertain_message_keeps_its_tokens() {
    let up = TestUpstream::start().await;
    let layer = "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\n\
                 limit = 1\ninterval_ms = 60000\nburst = 1\nmode = \"reject\"\n";
    let relay = smtp_relay(&up.url(), "", layer).await;
    // The relay's timeout is 2 s (`config_text`): the final reply comes after 3.
    up.set_fault(Fault::stall(Step::EndOfData, Duration::from_secs(3)));
    let message = b"Subject: once\r\n\r\nx\r\n";
    let mut c = relay.client().await;
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.net"], message)
        .await;
    assert!(
        code == 451 && text.contains("may have been delivered"),
        "{code} {text}"
    );
    up.set_fault(Fault::None);
    let mut c = relay.client().await;
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.net"], message)
        .await;
    assert!(
        code == 451 && text.starts_with("4.7.1"),
        "the retry: {code} {text}"
    );
    assert_eq!(up.wait_for(1).await.len(), 1);
    relay.stop().await;
}
