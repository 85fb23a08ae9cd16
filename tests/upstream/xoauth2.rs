//! XOAUTH2 upstreams (`auth = "xoauth2"`): the relay asks a stand-in token endpoint on
//! loopback for tokens and logs in to a test upstream that takes `AUTH XOAUTH2` alone, with a
//! token the endpoint issued for that mailbox. Client credentials stand for Microsoft (and
//! generic), a service account's JWT, checked with the test key's public half, for Google.

use std::sync::Arc;

use crate::support::auth::auth_config;
use crate::support::config::TestConfig;
use crate::support::host::have_program;
use crate::support::http::get;
use crate::support::relay::{config_text, upstream_relay, Relay};
use crate::support::token_endpoint::{Accepts, TestKey, TokenEndpoint};
use crate::support::upstream::TestUpstream;

const MESSAGE: &[u8] = b"Subject: scan\r\n\r\nyour scan\r\n";
const SCOPE: &str = "https://outlook.office365.com/.default";

/// A Microsoft-like endpoint: client credentials, the secret in `var`.
async fn client_credentials(var: &str) -> Arc<TokenEndpoint> {
    std::env::set_var(var, "app-secret");
    Arc::new(
        TokenEndpoint::start(Accepts::Secret {
            client_id: "app-id".into(),
            secret: "app-secret".into(),
            scope: SCOPE.into(),
        })
        .await,
    )
}

/// `[upstream]`'s XOAUTH2 keys against `endpoint`'s URL: a generic provider (client
/// credentials, as Microsoft's) logging in as `username`, its secret in `var`.
fn generic(username: &str, token_url: &str, var: &str) -> String {
    format!(
        "tls = \"none\"\nauth = \"xoauth2\"\nusername = \"{username}\"\n\
         mailboxes = {mailboxes}\n\
         [upstream.oauth]\nprovider = \"generic\"\nclient_id = \"app-id\"\n\
         client_secret_env = \"{var}\"\ntoken_url = \"{token_url}\"\nscope = \"{SCOPE}\"\n",
        mailboxes = if username == "{sender}" {
            "[\"@contoso.com\"]"
        } else {
            "[]"
        },
    )
}

/// A relay to `up` with `keys` (XOAUTH2's, `[upstream.oauth]` last) in its `[upstream]`, after
/// `upstream_keys` (a 2 s timeout when they set none).
async fn relay(up: &TestUpstream, keys: &str, upstream_keys: &str) -> Relay {
    let timeout = match upstream_keys.contains("timeout_ms") {
        true => "",
        false => "timeout_ms = 2000",
    };
    let config = (TestConfig::new().upstream(&up.url()))
        .then(timeout)
        .then(upstream_keys)
        .then(keys);
    upstream_relay(&config.text()).await
}

async fn send(relay: &Relay, from: &str) -> (u16, String) {
    let mut client = relay.client().await;
    client.send_mail(from, &["to@example.net"], MESSAGE).await
}

#[tokio::test]
async fn a_message_goes_logged_in_with_a_token_from_the_endpoint() {
    let tokens = client_credentials("XOAUTH2_TEST_SECRET_GOES").await;
    let up = TestUpstream::start().await;
    up.require_xoauth2(tokens.checker());
    let keys = generic(
        "printer@contoso.com",
        &tokens.url(),
        "XOAUTH2_TEST_SECRET_GOES",
    );
    let relay = relay(&up, &keys, "").await;
    assert_eq!(send(&relay, "printer@contoso.com").await.0, 250);
    assert_eq!(send(&relay, "printer@contoso.com").await.0, 250);
    let got = up.wait_for(2).await;
    assert_eq!(got[0].auth.as_deref(), Some("printer@contoso.com"));
    let requests = tokens.requests();
    assert_eq!(requests.len(), 1, "the token is kept: {requests:?}");
    assert_eq!(requests[0].grant_type, "client_credentials");
    assert_eq!(up.auth_refusals(), 0);
    relay.stop().await;
}

#[tokio::test]
async fn google_signs_a_jwt_for_the_mailbox_with_the_service_accounts_key() {
    let key = TestKey::new();
    std::env::set_var("XOAUTH2_TEST_GOOGLE_KEY", key.service_account_json());
    let tokens = Arc::new(
        TokenEndpoint::start(Accepts::ServiceAccount {
            public_pem: key.public_pem.clone(),
            scope: "https://mail.google.com/".into(),
        })
        .await,
    );
    let up = TestUpstream::start().await;
    up.require_xoauth2(tokens.checker());
    let keys = format!(
        "tls = \"none\"\nauth = \"xoauth2\"\nusername = \"scanner@contoso.com\"\n\
         [upstream.oauth]\nprovider = \"google\"\nkey_env = \"XOAUTH2_TEST_GOOGLE_KEY\"\n\
         token_url = \"{}\"\n",
        tokens.url()
    );
    let relay = relay(&up, &keys, "").await;
    let (code, text) = send(&relay, "scanner@contoso.com").await;
    assert_eq!(code, 250, "{text}: {:?}", tokens.requests());
    let requests = tokens.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].subject.as_deref(), Some("scanner@contoso.com"));
    assert_eq!(
        up.wait_for(1).await[0].auth.as_deref(),
        Some("scanner@contoso.com")
    );
    relay.stop().await;
}

/// A token about to expire is not used: each new connection (one message each here) logs in
/// with a token asked for before it, and upstream never sees an expired one.
#[tokio::test]
async fn an_expired_token_is_renewed_before_use() {
    let tokens = client_credentials("XOAUTH2_TEST_SECRET_EXPIRED").await;
    tokens.set_expires_in(1);
    let up = TestUpstream::start().await;
    let endpoint = Arc::clone(&tokens);
    // Upstream takes only the newest token: an older one has expired.
    up.require_xoauth2(Arc::new(move |user: &str, token: &str| {
        let newest = format!("tok-{}", endpoint.requests().len());
        token == newest && endpoint.is_valid(user, token)
    }));
    let keys = generic(
        "printer@contoso.com",
        &tokens.url(),
        "XOAUTH2_TEST_SECRET_EXPIRED",
    );
    let relay = relay(&up, &keys, "max_messages_per_connection = 1").await;
    for _ in 0..2 {
        assert_eq!(send(&relay, "printer@contoso.com").await.0, 250);
    }
    assert_eq!(up.wait_for(2).await.len(), 2);
    assert_eq!(tokens.requests().len(), 2);
    assert_eq!(up.auth_refusals(), 0, "no expired token reached upstream");
    relay.stop().await;
}

/// Upstream refuses a token (revoked): a new one is asked for and the login tried once more;
/// when that one is refused too, the client gets `451 4.7.0` and no third token is asked for.
#[tokio::test]
async fn a_token_upstream_refuses_is_renewed_once() {
    let tokens = client_credentials("XOAUTH2_TEST_SECRET_REFUSED").await;
    let up = TestUpstream::start().await;
    up.require_xoauth2(tokens.checker());
    let keys = generic(
        "printer@contoso.com",
        &tokens.url(),
        "XOAUTH2_TEST_SECRET_REFUSED",
    );
    let relay = relay(&up, &keys, "max_messages_per_connection = 1").await;
    assert_eq!(send(&relay, "printer@contoso.com").await.0, 250);
    tokens.revoke_all();
    assert_eq!(send(&relay, "printer@contoso.com").await.0, 250);
    assert_eq!((tokens.requests().len(), up.auth_refusals()), (2, 1));

    relay.stop().await;

    let refuses_all = TestUpstream::start().await;
    refuses_all.require_xoauth2(Arc::new(|_: &str, _: &str| false));
    let keys = generic(
        "printer@contoso.com",
        &tokens.url(),
        "XOAUTH2_TEST_SECRET_REFUSED",
    );
    let relay = self::relay(&refuses_all, &keys, "").await;
    let (code, text) = send(&relay, "printer@contoso.com").await;
    assert_eq!(
        (code, text.as_str()),
        (451, "4.7.0 Upstream refused the relay's credentials")
    );
    assert_eq!(
        refuses_all.auth_refusals(),
        2,
        "the first token, then one renewal"
    );
    assert_eq!(tokens.requests().len(), 4);
    relay.stop().await;
}

/// The token endpoint silent (or refusing connections): `451 4.7.0` once the upstream's
/// timeout has passed, nothing sent upstream; `/readyz` says why and the failures are counted.
#[tokio::test]
async fn the_token_endpoint_down_gives_451_and_shows_in_readyz_and_the_metrics() {
    std::env::set_var("XOAUTH2_TEST_SECRET_DOWN", "app-secret");
    let silent = TokenEndpoint::hanging().await;
    let up = TestUpstream::start().await;
    up.require_xoauth2(Arc::new(|_: &str, _: &str| true));
    let keys = generic(
        "printer@contoso.com",
        &silent.url(),
        "XOAUTH2_TEST_SECRET_DOWN",
    );
    let relay = relay(&up, &keys, "timeout_ms = 500").await;
    let (code, text) = send(&relay, "printer@contoso.com").await;
    assert_eq!(
        (code, text.as_str()),
        (451, "4.7.0 The relay has no credentials for upstream")
    );
    assert_eq!(up.connections(), 0, "no connection without a token");

    let admin = relay.start_admin().await;
    let (status, body) = get(admin, "/readyz").await;
    assert_eq!(status, 200, "the replica still takes mail: {body}");
    assert!(
        body.contains("no XOAUTH2 token: the token endpoint did not answer within 500ms"),
        "{body}"
    );
    let failed = r#"mailsluice_upstream_token_requests_total{result="failed"}"#;
    assert!(relay.metric(failed) >= 2.0, "the message's and the probe's");
    relay.stop().await;
}

/// `username = "{sender}"`: each sender logs in as its own mailbox, on connections of its own
/// (each mailbox's pool), with a token of its own (Google: `sub` is the mailbox).
#[tokio::test]
async fn each_sender_logs_in_as_itself_with_its_own_pool() {
    let key = TestKey::new();
    std::env::set_var("XOAUTH2_TEST_GOOGLE_SENDERS", key.service_account_json());
    let tokens = Arc::new(
        TokenEndpoint::start(Accepts::ServiceAccount {
            public_pem: key.public_pem.clone(),
            scope: "https://mail.google.com/".into(),
        })
        .await,
    );
    let up = TestUpstream::start().await;
    up.require_xoauth2(tokens.checker());
    let keys = format!(
        "tls = \"none\"\nauth = \"xoauth2\"\nusername = \"{{sender}}\"\n\
         mailboxes = [\"@contoso.com\", \"billing@fabrikam.com\"]\n\
         [upstream.oauth]\nprovider = \"google\"\nkey_env = \"XOAUTH2_TEST_GOOGLE_SENDERS\"\n\
         token_url = \"{}\"\n",
        tokens.url()
    );
    let relay = relay(&up, &keys, "").await;
    for from in [
        "alice@contoso.com",
        "billing@fabrikam.com",
        "alice@contoso.com",
    ] {
        let (code, text) = send(&relay, from).await;
        assert_eq!(code, 250, "{from}: {text}");
    }
    let got = up.wait_for(3).await;
    let logins: Vec<_> = got
        .iter()
        .map(|m| (m.auth.clone().unwrap(), m.conn))
        .collect();
    assert_eq!(logins[0].0, "alice@contoso.com");
    assert_eq!(logins[1].0, "billing@fabrikam.com");
    assert_eq!(logins[2], logins[0], "alice's own pooled connection again");
    assert_ne!(logins[0].1, logins[1].1, "one pool per mailbox");
    let subjects: Vec<_> = tokens
        .requests()
        .into_iter()
        .map(|r| r.subject.unwrap())
        .collect();
    assert_eq!(subjects, ["alice@contoso.com", "billing@fabrikam.com"]);
    relay.stop().await;
}

#[tokio::test]
async fn a_sender_outside_the_mailboxes_is_refused_before_any_token_is_asked_for() {
    let tokens = client_credentials("XOAUTH2_TEST_SECRET_OUTSIDE").await;
    let up = TestUpstream::start().await;
    up.require_xoauth2(tokens.checker());
    let keys = generic("{sender}", &tokens.url(), "XOAUTH2_TEST_SECRET_OUTSIDE");
    let relay = relay(&up, &keys, "").await;
    let (code, text) = send(&relay, "mallory@elsewhere.example").await;
    assert_eq!(code, 550, "{text}");
    assert_eq!(
        text,
        "5.7.1 upstream: <mallory@elsewhere.example> is not a mailbox this relay may send as"
    );
    assert_eq!((tokens.requests().len(), up.connections()), (0, 0));
    assert_eq!(send(&relay, "ops@contoso.com").await.0, 250);
    relay.stop().await;
}

/// An app that knows only a password: swaks logs in to the relay with AUTH PLAIN, and the
/// relay sends its message on with XOAUTH2.
#[tokio::test]
async fn swaks_with_a_password_sends_through_an_xoauth2_upstream() {
    if !have_program("swaks") {
        return;
    }
    let tokens = client_credentials("XOAUTH2_TEST_SECRET_SWAKS").await;
    let up = TestUpstream::start().await;
    up.require_xoauth2(tokens.checker());
    let users = [("printer", "pr1nter", "senders = [\"printer@contoso.com\"]")];
    let smtp = format!(
        "trusted_networks = []\nallow_plaintext_auth = true\n{}",
        auth_config(&users, "failure_delay_ms = 0")
    );
    let keys = generic(
        "printer@contoso.com",
        &tokens.url(),
        "XOAUTH2_TEST_SECRET_SWAKS",
    );
    let relay = upstream_relay(&config_text(&up.url(), &smtp, &keys)).await;
    let out = tokio::process::Command::new("swaks")
        .args(["--server", &relay.addr.to_string(), "--auth", "PLAIN"])
        .args(["--auth-user", "printer", "--auth-password", "pr1nter"])
        .args(["--from", "printer@contoso.com", "--to", "user@example.net"])
        .args(["--header", "From: printer@contoso.com", "--body", "scanned"])
        .output()
        .await
        .unwrap();
    let transcript = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "swaks failed:\n{transcript}");
    assert!(transcript.contains("<-  235"), "{transcript}");
    let got = up.wait_for(1).await;
    assert_eq!(got[0].auth.as_deref(), Some("printer@contoso.com"));
    assert!(String::from_utf8_lossy(&got[0].data).contains("scanned"));
    assert_eq!(tokens.requests().len(), 1);
    // The relay's own AUTH line upstream: the XOAUTH2 SASL string, never the client's password.
    let auth_line = (up.commands().into_iter())
        .find(|c| c.starts_with("AUTH "))
        .unwrap();
    assert!(auth_line.starts_with("AUTH XOAUTH2 "), "{auth_line}");
    relay.stop().await;
}
