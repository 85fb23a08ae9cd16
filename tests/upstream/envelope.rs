//! The SMTP forwarder writes MAIL and RCPT with the paths exactly as the envelope holds them
//! (the client's text): quoted local parts keep their quotes, `postmaster` needs no domain,
//! and what could break the command line is refused before MAIL.

use mailsluice::upstream::{Forwarder, UpstreamError};

use super::{envelope, smtp_forwarder, SIMPLE};
use crate::support::upstream::TestUpstream;

#[tokio::test]
async fn paths_are_written_as_given() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    let env = envelope(
        Some(r#""evil sender"@t.test"#),
        &[
            r#""victim@evil.test"@good.test"#,
            r#""x NOTIFY=SUCCESS ORCPT=rfc822;spy"@c.test"#,
            r#""a\"b\\"@c.test"#,
            "postmaster",
            "user@[IPv6:::1]",
        ],
    );
    fwd.forward(&env, SIMPLE).await.expect("accepted");
    up.wait_for(1).await;
    let lines: Vec<String> = up
        .commands()
        .into_iter()
        .filter(|c| c.starts_with("MAIL ") || c.starts_with("RCPT "))
        .collect();
    assert_eq!(
        lines,
        [
            r#"MAIL FROM:<"evil sender"@t.test>"#,
            r#"RCPT TO:<"victim@evil.test"@good.test>"#,
            r#"RCPT TO:<"x NOTIFY=SUCCESS ORCPT=rfc822;spy"@c.test>"#,
            r#"RCPT TO:<"a\"b\\"@c.test>"#,
            "RCPT TO:<postmaster>",
            "RCPT TO:<user@[IPv6:::1]>",
        ]
    );
}

#[tokio::test]
async fn paths_that_could_break_the_line_are_refused_before_mail() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    for (from, rcpt) in [
        (Some("a@x.test"), "x NOTIFY=SUCCESS@c.test"),
        (Some("a@x.test"), r#""open@c.test"#),
        (Some("a@x.test"), r#""a>b"@c.test"#),
        (Some("postmaster"), "b@c.test"),
        (Some("a b@x.test"), "b@c.test"),
    ] {
        let err = fwd
            .forward(&envelope(from, &[rcpt]), SIMPLE)
            .await
            .unwrap_err();
        assert!(
            matches!(err, UpstreamError::Rejected { code: 553, .. }),
            "{from:?} {rcpt}: {err:?}"
        );
    }
    assert_eq!(up.connections(), 0);
}
