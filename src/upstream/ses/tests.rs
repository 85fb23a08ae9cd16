use super::*;

fn forwarder(extra: &str) -> SesForwarder {
    let text = format!(
        "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"ses://eu-west-1\"\n\
         endpoint_url = \"http://127.0.0.1:9\"\n{extra}\n"
    );
    let cfg = crate::config::Config::parse(&text)
        .unwrap()
        .upstreams
        .remove(0);
    let credentials = aws_sdk_sesv2::config::Credentials::new("AKID", "secret", None, None, "test");
    SesForwarder::with_credentials(&cfg, credentials).unwrap()
}

/// Past SES's 40 MB, refused before any request (the endpoint above answers nothing).
#[tokio::test]
async fn a_message_over_forty_megabytes_is_refused_552_before_any_request() {
    let big = vec![b'a'; MAX_MESSAGE_BYTES - 10];
    let head: &[u8] = b"Subject: big\r\n\r\n";
    let envelope = Envelope {
        from: Some("a@example.com".into()),
        rcpts: vec!["b@example.net".into()],
        ..Envelope::default()
    };
    let pieces = [head, &big];
    let outgoing = Outgoing {
        envelope: &envelope,
        pieces: &pieces,
        tenant: None,
        room: None,
    };
    let err = forwarder("").send(&outgoing).await.unwrap_err();
    assert_eq!(
        err.reply().map(|r| (r.0, r.1)),
        Some((552, Some("5.3.4"))),
        "{err}"
    );
    assert!(
        forwarder("").client.get().is_none(),
        "no client was even built"
    );
}
