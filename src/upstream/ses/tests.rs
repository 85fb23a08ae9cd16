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
        upstream_tenant: None,
        room: None,
    };
    let err = forwarder("").send(&outgoing).await.unwrap_err();
    assert_eq!(
        err.reply().map(|r| (r.0, r.1)),
        Some((552, Some("5.3.4"))),
        "{err}"
    );
    assert!(
        forwarder("").api.client.get().is_none(),
        "no client was even built"
    );
}

/// Credentials that cannot be loaded (as the default chain when it finds none): the message
/// is refused as "no credentials" (`451 4.7.0`), never as SES refusing them, and nothing is
/// sent (the endpoint answers nothing).
#[tokio::test]
async fn no_credentials_is_told_from_credentials_refused() {
    #[derive(Debug)]
    struct NoneFound;
    impl ProvideCredentials for NoneFound {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            aws_credential_types::provider::future::ProvideCredentials::ready(Err(
                aws_credential_types::provider::error::CredentialsError::not_loaded(
                    "no providers in chain provided credentials",
                ),
            ))
        }
    }
    let text = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"ses://eu-west-1\"\n\
                endpoint_url = \"http://127.0.0.1:9\"\n";
    let cfg = crate::config::Config::parse(text)
        .unwrap()
        .upstreams
        .remove(0);
    let ses = SesForwarder::with_credentials(&cfg, NoneFound).unwrap();
    let envelope = Envelope {
        from: Some("a@example.com".into()),
        rcpts: vec!["b@example.net".into()],
        ..Envelope::default()
    };
    let err = ses
        .forward(&envelope, b"Subject: s\r\n\r\nx\r\n")
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::NoCredentials(_)), "{err:?}");
    assert_eq!(
        crate::upstream::outcome(&Err(err.clone())),
        crate::message::Outcome::UpstreamCredentials
    );
    assert!(
        err.to_string().len() < 600,
        "a short cause, no debug dump: {err}"
    );
}
