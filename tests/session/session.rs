//! The SMTP dialogue over real TCP, with the relay in-process and a recording forwarder.

use crate::support::memory::without_received;
use crate::support::relay::{memory_relay, Client};
use mailsluice::upstream::UpstreamError;

#[tokio::test]
async fn greeting_and_ehlo_advertise_extensions() {
    let (relay, _) = memory_relay("max_recipients = 7", "").await;
    let mut c = relay.client().await;
    let (code, text) = c.cmd("EHLO client.test").await;
    assert_eq!(code, 250);
    for ext in [
        "PIPELINING",
        "SIZE 26214400",
        "8BITMIME",
        "SMTPUTF8",
        "ENHANCEDSTATUSCODES",
    ] {
        assert!(text.lines().any(|l| l == ext), "{ext} missing in {text}");
    }
    assert!(text.contains("LIMITS RCPTMAX=7"), "{text}");
    assert_eq!(c.cmd("QUIT").await.0, 221);
    assert!(c.is_closed().await);
    relay.stop().await;
}

#[tokio::test]
async fn message_is_forwarded_byte_exact_with_received_header() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    let body = b"Subject: dots\r\n\r\n..leading dot\r\n...\r\n\xc3\xa9t\xc3\xa9 8bit\r\n";
    // Client side dot-stuffing: lines starting with '.' get another '.'.
    let (code, text) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: dots\r\n\r\n...leading dot\r\n....\r\n\xc3\xa9t\xc3\xa9 8bit\r\n",
        )
        .await;
    assert_eq!(code, 250, "{text}");
    assert!(text.contains("mem-1"), "upstream's id relayed: {text}");
    let got = fwd.messages();
    assert_eq!(got.len(), 1);
    assert_eq!(without_received(&got[0].1), body);
    let received = String::from_utf8_lossy(&got[0].1);
    assert!(received.starts_with("Received: from client.test ([127.0.0.1])"));
    relay.stop().await;
}

#[tokio::test]
async fn null_sender_stays_null_and_many_recipients_pass() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    let rcpts: Vec<String> = (0..50).map(|i| format!("r{i}@example.com")).collect();
    let refs: Vec<&str> = rcpts.iter().map(String::as_str).collect();
    let (code, _) = c
        .send_mail("", &refs, b"Subject: bounce\r\n\r\nx\r\n")
        .await;
    assert_eq!(code, 250);
    let (env, _) = &fwd.messages()[0];
    assert_eq!(env.from, None);
    assert_eq!(env.rcpts, rcpts);
    relay.stop().await;
}

#[tokio::test]
async fn esmtp_parameters_are_accepted() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    let (code, text) = c
        .cmd("MAIL FROM:<a@example.com> SIZE=100 BODY=8BITMIME SMTPUTF8")
        .await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(c.cmd("RCPT TO:<b@example.com>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"x\r\n.\r\n").await;
    assert_eq!(c.reply().await.0, 250);
    let (env, _) = &fwd.messages()[0];
    assert!(env.smtputf8 && env.body_8bit);
    relay.stop().await;
}

#[tokio::test]
async fn pipelined_commands_are_answered_in_order() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    c.send(b"EHLO x\r\nMAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.com>\r\nRCPT TO:<c@example.com>\r\nDATA\r\n")
        .await;
    let codes: Vec<u16> = [(); 5].iter().map(|_| 0).collect();
    let mut got = Vec::new();
    for _ in codes {
        got.push(c.reply().await.0);
    }
    assert_eq!(got, [250, 250, 250, 250, 354]);
    c.send(b"hi\r\n.\r\nQUIT\r\n").await;
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(c.reply().await.0, 221);
    assert_eq!(fwd.messages()[0].0.rcpts.len(), 2);
    relay.stop().await;
}

#[tokio::test]
async fn three_transactions_on_one_connection_with_rset() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    for i in 0..3 {
        let (code, _) = c
            .send_mail(&format!("s{i}@example.com"), &["r@example.com"], b"x\r\n")
            .await;
        assert_eq!(code, 250);
        assert_eq!(c.cmd("RSET").await.0, 250);
    }
    // A transaction abandoned with RSET sends nothing.
    c.cmd("MAIL FROM:<z@example.com>").await;
    c.cmd("RCPT TO:<r@example.com>").await;
    assert_eq!(c.cmd("RSET").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<r@example.com>").await.0, 503);
    let froms: Vec<_> = fwd
        .messages()
        .into_iter()
        .map(|(e, _)| e.from.unwrap())
        .collect();
    assert_eq!(
        froms,
        ["s0@example.com", "s1@example.com", "s2@example.com"]
    );
    relay.stop().await;
}

#[tokio::test]
async fn bad_sequences_and_syntax_get_5xx_and_the_session_goes_on() {
    let (relay, _) = memory_relay("", "").await;
    let mut c = relay.client().await;
    assert_eq!(c.cmd("RCPT TO:<a@b>").await.0, 503);
    assert_eq!(c.cmd("DATA").await.0, 503);
    assert_eq!(c.cmd("FROB").await.0, 500);
    assert_eq!(c.cmd("MAIL FROM:<<<").await.0, 501);
    assert_eq!(c.cmd("MAIL FROM:<a@b> FROB=1").await.0, 555);
    assert_eq!(c.cmd("VRFY someone").await.0, 252);
    assert_eq!(c.cmd("HELP").await.0, 214);
    assert_eq!(c.cmd("NOOP").await.0, 250);
    assert_eq!(c.cmd("MAIL FROM:<a@b>").await.0, 250);
    assert_eq!(c.cmd("MAIL FROM:<a@b>").await.0, 503);
    assert_eq!(c.cmd("DATA").await.0, 554);
    relay.stop().await;
}

#[tokio::test]
async fn recipient_bound_answers_452_and_keeps_the_accepted_ones() {
    let (relay, fwd) = memory_relay("max_recipients = 3", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    c.cmd("MAIL FROM:<a@example.com>").await;
    for i in 0..3 {
        assert_eq!(c.cmd(&format!("RCPT TO:<r{i}@example.com>")).await.0, 250);
    }
    let (code, text) = c.cmd("RCPT TO:<r3@example.com>").await;
    assert_eq!((code, text.starts_with("4.5.3")), (452, true), "{text}");
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"x\r\n.\r\n").await;
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(fwd.messages()[0].0.rcpts.len(), 3);
    relay.stop().await;
}

#[tokio::test]
async fn message_at_size_limit_passes_and_one_byte_over_gets_552() {
    let (relay, fwd) = memory_relay("max_message_bytes = 1000", "").await;
    let mut c = relay.client().await;
    let line = [b'a'; 98];
    let mut exact = Vec::new();
    for _ in 0..10 {
        exact.extend_from_slice(&line);
        exact.extend_from_slice(b"\r\n");
    }
    assert_eq!(exact.len(), 1000);
    assert_eq!(
        c.send_mail("a@example.com", &["b@example.com"], &exact)
            .await
            .0,
        250
    );
    let mut over = exact.clone();
    over.insert(0, b'b');
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.com"], &over)
        .await;
    assert_eq!((code, text.starts_with("5.3.4")), (552, true), "{text}");
    assert_eq!(fwd.messages().len(), 1);
    // SIZE declared over the bound is refused at MAIL.
    assert_eq!(c.cmd("MAIL FROM:<a@example.com> SIZE=1001").await.0, 552);
    assert_eq!(c.cmd("NOOP").await.0, 250);
    relay.stop().await;
}

#[tokio::test]
async fn over_long_command_line_gets_500_and_session_goes_on() {
    let (relay, _) = memory_relay("max_line_bytes = 512", "").await;
    let mut c = relay.client().await;
    let long = format!("NOOP {}\r\n", "x".repeat(5000));
    c.send(long.as_bytes()).await;
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("5.5.2")), (500, true), "{text}");
    assert_eq!(c.cmd("NOOP").await.0, 250);
    relay.stop().await;
}

#[tokio::test]
async fn over_long_data_line_refuses_the_message() {
    let (relay, fwd) = memory_relay("max_line_bytes = 512", "").await;
    let mut c = relay.client().await;
    let msg = format!("Subject: x\r\n\r\n{}\r\n", "y".repeat(600));
    let (code, _) = c
        .send_mail("a@example.com", &["b@example.com"], msg.as_bytes())
        .await;
    assert_eq!(code, 500);
    assert!(fwd.messages().is_empty());
    assert_eq!(c.cmd("NOOP").await.0, 250);
    relay.stop().await;
}

#[tokio::test]
async fn smuggled_end_of_data_never_makes_a_second_message() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    let smuggle = b"Subject: one\r\n\r\nbody\n.\nMAIL FROM:<evil@example.com>\nRCPT TO:<v@example.com>\nDATA\nSubject: two\n\r\n";
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.com"], smuggle)
        .await;
    assert_eq!((code, text.starts_with("5.6.0")), (550, true), "{text}");
    assert!(
        fwd.messages().is_empty(),
        "nothing with a bare LF is relayed"
    );
    assert_eq!(c.cmd("NOOP").await.0, 250);
    relay.stop().await;
}

#[tokio::test]
async fn client_disconnecting_mid_data_forwards_nothing() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    c.cmd("MAIL FROM:<a@example.com>").await;
    c.cmd("RCPT TO:<b@example.com>").await;
    c.cmd("DATA").await;
    c.send(b"Subject: cut\r\n\r\nhalf a mess").await;
    drop(c);
    // A later session proves the first one is over; nothing was forwarded.
    let mut c2 = relay.client().await;
    assert_eq!(
        c2.send_mail("x@example.com", &["y@example.com"], b"x\r\n")
            .await
            .0,
        250
    );
    let msgs = fwd.messages();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].0.from.as_deref(), Some("x@example.com"));
    relay.stop().await;
}

#[tokio::test]
async fn upstream_refusal_keeps_class_and_text() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    fwd.fail_with(Some(UpstreamError::Rejected {
        code: 554,
        enhanced: Some("5.7.1".into()),
        text: "Email address is not verified.".into(),
    }));
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.com"], b"x\r\n")
        .await;
    assert_eq!(code, 554);
    assert!(text.contains("Email address is not verified."), "{text}");
    fwd.fail_with(Some(UpstreamError::Unavailable("refused".into())));
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.com"], b"x\r\n")
        .await;
    assert_eq!((code, text.starts_with("4.4.1")), (451, true), "{text}");
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn idle_client_gets_421_4_4_2_and_is_closed() {
    let (relay, _) = memory_relay("idle_timeout_ms = 1000", "").await;
    let mut c = relay.client().await;
    // Paused time: the runtime jumps to the timeout when everything is idle.
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("4.4.2")), (421, true), "{text}");
    assert!(c.is_closed().await);
    relay.stop().await;
}

#[tokio::test]
async fn connection_bound_answers_421_4_3_2() {
    let (relay, _) = memory_relay("max_connections = 2", "").await;
    let _a = relay.client().await;
    let _b = relay.client().await;
    let mut third = Client::connect_raw(relay.addr).await;
    let (code, text) = third.reply().await;
    assert_eq!((code, text.starts_with("4.3.2")), (421, true), "{text}");
    assert!(third.is_closed().await);
    drop(_a);
    // Once one leaves, a new client is served again (the slot is released on close).
    let mut ok = None;
    for _ in 0..50 {
        let mut c = Client::connect_raw(relay.addr).await;
        let (code, _) = c.reply().await;
        if code == 220 {
            ok = Some(c);
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(ok.is_some(), "a freed slot is reused");
    relay.stop().await;
}

#[tokio::test]
async fn shutdown_tells_idle_clients_421_and_run_returns() {
    let (relay, _) = memory_relay("", "").await;
    let mut c = relay.client().await;
    assert_eq!(c.cmd("EHLO x").await.0, 250);
    relay.trigger_shutdown();
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("4.3.2")), (421, true), "{text}");
    relay.stop().await;
}

#[tokio::test]
async fn untrusted_client_cannot_relay() {
    let (relay, fwd) = memory_relay("trusted_networks = [\"192.0.2.0/24\"]", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    let (code, text) = c.cmd("MAIL FROM:<a@example.com>").await;
    assert_eq!((code, text.starts_with("5.7.0")), (530, true), "{text}");
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}
