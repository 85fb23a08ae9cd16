//! The envelope as the client wrote it, through the relay to a real SMTP upstream: quoted local
//! parts keep their quotes, address literals and `<postmaster>` pass, `SIZE` is compared
//! whatever its length, and parameters we do not offer are refused instead of dropped. And
//! the trace of the hop (`Received:`), whose structure no EHLO name can change.

use crate::support::relay::{memory_relay, smtp_relay, Client};
use crate::support::upstream::TestUpstream;

/// The MAIL and RCPT lines upstream received, in order.
fn envelope_lines(up: &TestUpstream) -> Vec<String> {
    up.commands()
        .into_iter()
        .filter(|c| c.starts_with("MAIL ") || c.starts_with("RCPT "))
        .collect()
}

/// Sends each command and checks the code it gets.
async fn expect(c: &mut Client, steps: &[(&str, u16)]) {
    for (line, code) in steps {
        let (got, text) = c.cmd(line).await;
        assert_eq!(got, *code, "{line}: {text}");
    }
}

async fn send_body(c: &mut Client) {
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: s\r\n\r\nhi\r\n.\r\n").await;
    let (code, text) = c.reply().await;
    assert_eq!(code, 250, "{text}");
}

#[tokio::test]
async fn quoted_local_parts_reach_upstream_quoted() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    let mut c = relay.client().await;
    let lines = [
        r#"MAIL FROM:<"evil sender"@t.test>"#,
        r#"RCPT TO:<"victim@evil.test"@good.test>"#,
        r#"RCPT TO:<"quoted local"@c.test>"#,
        r#"RCPT TO:<"x NOTIFY=SUCCESS ORCPT=rfc822;spy"@c.test>"#,
        r#"RCPT TO:<"back\\slash \"quote\""@c.test>"#,
        r#"RCPT TO:<"plain"@c.test>"#,
        "RCPT TO:<dot.string@c.test>",
    ];
    expect(&mut c, &[("EHLO client.test", 250)]).await;
    for line in lines {
        expect(&mut c, &[(line, 250)]).await;
    }
    send_body(&mut c).await;
    up.wait_for(1).await;
    assert_eq!(
        envelope_lines(&up),
        lines,
        "the envelope changed on the way"
    );
    relay.stop().await;
}

#[tokio::test]
async fn an_angle_bracket_inside_quotes_is_refused_at_once() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    expect(
        &mut c,
        &[
            ("EHLO client.test", 250),
            (r#"MAIL FROM:<"a<b"@c.test>"#, 553),
            ("MAIL FROM:<a@c.test>", 250),
            (r#"RCPT TO:<"a>b"@c.test>"#, 553),
            (r#"RCPT TO:<"a> NOTIFY=SUCCESS"@c.test>"#, 553),
            ("RCPT TO:<b@c.test>", 250),
        ],
    )
    .await;
    send_body(&mut c).await;
    assert_eq!(fwd.messages()[0].0.rcpts, ["b@c.test"]);
    relay.stop().await;
}

#[tokio::test]
async fn size_over_the_limit_is_552_however_many_digits() {
    let (relay, _) = memory_relay("max_message_bytes = 1000", "").await;
    let mut c = relay.client().await;
    expect(&mut c, &[("EHLO client.test", 250)]).await;
    for size in [
        "1001",
        "1000000000000000000",            // 19 digits
        "10000000000000000000",           // 20
        "100000000000000000000",          // 21
        "184467440737095516161844674407", // 30
        "99999999999999999999999999999999999999999999",
    ] {
        let (code, text) = c.cmd(&format!("MAIL FROM:<a@b.test> SIZE={size}")).await;
        assert_eq!((code, &text[..5]), (552, "5.3.4"), "SIZE={size}: {text}");
    }
    expect(
        &mut c,
        &[
            ("MAIL FROM:<a@b.test> SIZE=x1", 501),
            ("MAIL FROM:<a@b.test> SIZE=", 501),
            ("MAIL FROM:<a@b.test> SIZE=00000000000000000000001000", 250),
        ],
    )
    .await;
    relay.stop().await;
}

#[tokio::test]
async fn postmaster_and_address_literals_are_accepted_and_relayed_as_given() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    let mut c = relay.client().await;
    let lines = [
        "MAIL FROM:<app@[127.0.0.1]>",
        "RCPT TO:<postmaster>",
        "RCPT TO:<Postmaster>",
        "RCPT TO:<user@[127.0.0.1]>",
        "RCPT TO:<user@[IPv6:::1]>",
        "RCPT TO:<user@[IPv6:2001:db8::1]>",
    ];
    expect(&mut c, &[("EHLO client.test", 250)]).await;
    for line in lines {
        expect(&mut c, &[(line, 250)]).await;
    }
    send_body(&mut c).await;
    up.wait_for(1).await;
    assert_eq!(envelope_lines(&up), lines);
    relay.stop().await;
}

#[tokio::test]
async fn malformed_paths_are_501() {
    let (relay, _) = memory_relay("", "").await;
    let mut c = relay.client().await;
    expect(&mut c, &[("EHLO client.test", 250)]).await;
    for bad in [
        "MAIL FROM:<no-domain>",
        "MAIL FROM:<postmaster>",
        "MAIL FROM:<a@b",
        "MAIL FROM:<a..b@c.test>",
        "MAIL FROM:<a@[300.0.0.1]>",
        "MAIL FROM:<a@[IPv6:zz]>",
        "MAIL FROM:<a@-c.test>",
        r#"MAIL FROM:<"open@c.test>"#,
        "MAIL FROM:<a b@c.test>",
        "MAIL FROM:<a@c.test>SIZE=1",
        "MAIL FROM:<a@c.test> BODY=8BITMIME=x",
    ] {
        let (code, text) = c.cmd(bad).await;
        assert_eq!(code, 501, "{bad}: {text}");
    }
    expect(
        &mut c,
        &[
            ("MAIL FROM:<>", 250),
            ("RCPT TO:<>", 501),
            ("RCPT TO:<@route.test,@other.test:b@c.test>", 250),
        ],
    )
    .await;
    relay.stop().await;
}

#[tokio::test]
async fn parameters_we_do_not_offer_are_refused_555() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    expect(&mut c, &[("EHLO client.test", 250)]).await;
    for mail in [
        "MAIL FROM:<a@b.test> BODY=BINARYMIME",
        "MAIL FROM:<a@b.test> RET=FULL",
        "MAIL FROM:<a@b.test> ENVID=abc",
        "MAIL FROM:<a@b.test> HOLDFOR=10",
        "MAIL FROM:<a@b.test> REQUIRETLS",
    ] {
        let (code, text) = c.cmd(mail).await;
        assert_eq!((code, &text[..5]), (555, "5.5.4"), "{mail}: {text}");
    }
    expect(
        &mut c,
        &[(
            "MAIL FROM:<a@b.test> SIZE=10 BODY=8BITMIME SMTPUTF8 AUTH=<>",
            250,
        )],
    )
    .await;
    for rcpt in [
        "RCPT TO:<b@c.test> NOTIFY=SUCCESS",
        "RCPT TO:<b@c.test> ORCPT=rfc822;b@c.test",
        "RCPT TO:<b@c.test> NOTIFY=NEVER ORCPT=rfc822;x@y",
    ] {
        let (code, text) = c.cmd(rcpt).await;
        assert_eq!((code, &text[..5]), (555, "5.5.4"), "{rcpt}: {text}");
    }
    expect(&mut c, &[("RCPT TO:<b@c.test>", 250)]).await;
    send_body(&mut c).await;
    let env = &fwd.messages()[0].0;
    assert_eq!(env.rcpts, ["b@c.test"], "refused RCPTs left nothing behind");
    assert!(env.smtputf8 && env.body_8bit);
    relay.stop().await;
}

/// The first lines of the `Received:` header the relay put on a message sent after `EHLO helo`,
/// up to its `by`.
async fn received_from(helo: &str) -> String {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    assert_eq!(c.cmd(&format!("EHLO {helo}")).await.0, 250, "{helo}");
    assert_eq!(c.cmd("MAIL FROM:<a@example.com>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<b@example.com>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: s\r\n\r\nhi\r\n.\r\n").await;
    assert_eq!(c.reply().await.0, 250);
    relay.stop().await;
    let message = String::from_utf8(fwd.messages()[0].1.clone()).unwrap();
    let by = message.find("\tby ").expect("a by clause");
    message[..by].to_string()
}

#[tokio::test]
async fn a_hostile_helo_cannot_change_the_structure_of_the_received_header() {
    for (helo, from) in [
        (
            "client.test",
            "Received: from client.test ([127.0.0.1])\r\n",
        ),
        (
            "[127.0.0.1]",
            "Received: from [127.0.0.1] ([127.0.0.1])\r\n",
        ),
        ("[IPv6:::1]", "Received: from [IPv6:::1] ([127.0.0.1])\r\n"),
        // UTF-8 names are written as their A-label: the header stays ASCII.
        (
            "évil.test",
            "Received: from xn--vil-9la.test ([127.0.0.1])\r\n",
        ),
        (
            "x)(by mx.google.com",
            "Received: from unknown ([127.0.0.1])\r\n\t(helo=x??by)\r\n",
        ),
        (
            "a\\)b\u{1b}[2J",
            "Received: from unknown ([127.0.0.1])\r\n\t(helo=a??b?[2J)\r\n",
        ),
        (
            "é(",
            "Received: from unknown ([127.0.0.1])\r\n\t(helo=??)\r\n",
        ),
    ] {
        assert_eq!(received_from(helo).await, from, "EHLO {helo}");
    }
}
