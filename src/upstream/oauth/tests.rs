//! The token source against a token endpoint on loopback that answers with a set
//! `expires_in`, or never answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::config::OauthProvider;

/// An endpoint answering every POST with a new token (`t1`, `t2`, ...) good for
/// `expires_in` seconds, or (`None`) taking connections and never answering; its count of
/// requests.
async fn endpoint(expires_in: Option<u64>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut tcp, _)) = listener.accept().await {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            let Some(expires_in) = expires_in else {
                held.push(tcp);
                continue;
            };
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                // The head and the short form body arrive together, or soon after.
                while !String::from_utf8_lossy(&request).contains("grant_type") {
                    let read = tcp.read(&mut buf).await.unwrap_or(0);
                    if read == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..read]);
                }
                let body = format!(r#"{{"access_token":"t{n}","expires_in":{expires_in}}}"#);
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: \
                     {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = tcp.write_all(response.as_bytes()).await;
            });
        }
    });
    (url, asked)
}

fn source(url: &str, timeout: Duration) -> Arc<TokenSource> {
    let var = format!("MAILSLUICE_OAUTH_UNIT_{}", uuid::Uuid::new_v4().simple());
    std::env::set_var(&var, "secret");
    let config = OauthConfig {
        provider: OauthProvider::Generic,
        tenant_id: None,
        client_id: Some("app".into()),
        client_secret_env: Some(var),
        key_file: None,
        key_env: None,
        token_url: Some(url.into()),
        scope: None,
    };
    TokenSource::new("test", &config, timeout).unwrap()
}

#[tokio::test]
async fn a_good_token_is_kept_and_one_near_its_end_is_not_used() {
    let (url, asked) = endpoint(Some(3600)).await;
    let tokens = source(&url, Duration::from_secs(10));
    let first = tokens.token("a@contoso.com").await.unwrap();
    let again = tokens.token("b@contoso.com").await.unwrap();
    assert_eq!((&*first.secret, &*again.secret), ("t1", "t1"));
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "one token for every mailbox"
    );

    let (url, asked) = endpoint(Some(USE_MARGIN.as_secs())).await;
    let tokens = source(&url, Duration::from_secs(10));
    let first = tokens.token("a@contoso.com").await.unwrap();
    let second = tokens.token("a@contoso.com").await.unwrap();
    assert_eq!((&*first.secret, &*second.secret), ("t1", "t2"));
    assert_eq!(
        asked.load(Ordering::SeqCst),
        2,
        "one about to expire is renewed first"
    );
}

#[tokio::test]
async fn a_token_nearing_its_end_is_used_and_renewed_in_the_background() {
    let left = (USE_MARGIN + RENEW_MARGIN).as_secs() / 2;
    let (url, asked) = endpoint(Some(left)).await;
    let tokens = source(&url, Duration::from_secs(10));
    assert_eq!(&*tokens.token("a@contoso.com").await.unwrap().secret, "t1");
    let used = tokens.token("a@contoso.com").await.unwrap();
    assert_eq!(
        &*used.secret, "t1",
        "the message did not wait for the renewal"
    );
    for _ in 0..3000 {
        if tokens
            .cache
            .slot("")
            .current()
            .is_some_and(|t| &*t.secret == "t2")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert_eq!(&*tokens.token("a@contoso.com").await.unwrap().secret, "t2");
}

#[tokio::test]
async fn a_refused_token_is_replaced_unless_another_came_meanwhile() {
    let (url, asked) = endpoint(Some(3600)).await;
    let tokens = source(&url, Duration::from_secs(10));
    let refused = tokens.token("a@contoso.com").await.unwrap();
    let renewed = tokens.renew("a@contoso.com", &refused).await.unwrap();
    assert_eq!(&*renewed.secret, "t2");
    let same = tokens.renew("a@contoso.com", &refused).await.unwrap();
    assert_eq!(&*same.secret, "t2", "the refused one was replaced already");
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}

/// A token endpoint that never answers costs a message the upstream's timeout, no more (the
/// paused clock jumps to the timeout as soon as the runtime waits on the silent socket).
#[tokio::test(start_paused = true)]
async fn a_silent_token_endpoint_fails_within_the_timeout() {
    let (url, asked) = endpoint(None).await;
    let timeout = Duration::from_secs(7);
    let tokens = source(&url, timeout);
    let start = Instant::now();
    let error = tokens.token("a@contoso.com").await.unwrap_err();
    assert_eq!(start.elapsed(), timeout);
    assert!(
        matches!(error, TokenError::TimedOut(t) if t == timeout),
        "{error}"
    );
    assert!(asked.load(Ordering::SeqCst) <= 1);
    assert_eq!(tokens.counts.failed.load(Ordering::Relaxed), 1);
    let failure = tokens.last_failure().unwrap();
    assert_eq!(failure, "the token endpoint did not answer within 7s");
}

#[test]
fn a_token_never_shows_its_secret() {
    let token = Token {
        secret: "eyJ0eXAi.secret".into(),
        expires_at: Instant::now(),
    };
    assert!(!format!("{token:?}").contains("secret\""), "{token:?}");
    assert!(!format!("{token:?}").contains("eyJ"), "{token:?}");
}
