//! A stand-in OAuth 2.0 token endpoint on 127.0.0.1 (plain HTTP, as `token_url` allows for
//! loopback): it takes client credentials (`client_credentials` with the secret it was given)
//! or a Google service account's signed JWT (`jwt-bearer`, its RS256 signature checked with
//! the test key's public half, its `aud`, `scope` and `sub`), issues `tok-1`, `tok-2`, ...
//! with the `expires_in` the test sets, and says which tokens are good for whom, for the
//! test upstream's `AUTH XOAUTH2` (see `TestUpstream::require_xoauth2`). Or it takes
//! connections and never answers (`TokenEndpoint::hanging`).
//!
//! The test key is made at test time (`TestKey::new`), never committed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::upstream::TokenCheck;

/// An RSA key made for one test, and the Google service account JSON key around it.
pub struct TestKey {
    /// PKCS#8 PEM.
    pub private_pem: String,
    /// SubjectPublicKeyInfo PEM: what the stand-in checks signatures with.
    pub public_pem: String,
}

/// The service account's address in [`TestKey::service_account_json`].
pub const CLIENT_EMAIL: &str = "relay@test-project.iam.gserviceaccount.com";

impl TestKey {
    pub fn new() -> TestKey {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).expect("an RSA test key");
        TestKey {
            private_pem: pair.serialize_pem(),
            public_pem: pair.public_key_pem(),
        }
    }

    /// A service account's JSON key, as Google's console gives it (the fields the relay reads
    /// and a few it does not).
    pub fn service_account_json(&self) -> String {
        serde_json::json!({
            "type": "service_account",
            "project_id": "test-project",
            "private_key_id": "0123456789abcdef",
            "private_key": self.private_pem,
            "client_email": CLIENT_EMAIL,
            "client_id": "100000000000000000000",
            "token_uri": "https://oauth2.googleapis.com/token",
        })
        .to_string()
    }
}

impl Default for TestKey {
    fn default() -> TestKey {
        TestKey::new()
    }
}

/// What the endpoint takes.
#[derive(Clone)]
pub enum Accepts {
    /// `client_credentials` with this client id and secret, and this scope.
    Secret {
        client_id: String,
        secret: String,
        scope: String,
    },
    /// `jwt-bearer` signed by this public key, for this scope; the token is for the JWT's `sub`.
    ServiceAccount { public_pem: String, scope: String },
}

/// One request, as the endpoint read it.
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub grant_type: String,
    /// The JWT's `sub` (Google), when there is one.
    pub subject: Option<String>,
    /// Issued, or why not.
    pub answer: Result<String, String>,
}

#[derive(Default)]
struct State {
    requests: Vec<TokenRequest>,
    /// Each token issued: for whom (`None`: any mailbox of the app).
    issued: HashMap<String, Option<String>>,
    /// Tokens the upstream is to refuse from now on (revoked).
    revoked: Vec<String>,
}

pub struct TokenEndpoint {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    expires_in: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TokenEndpoint {
    /// An endpoint taking what `accepts` says, issuing tokens good for an hour.
    pub async fn start(accepts: Accepts) -> TokenEndpoint {
        TokenEndpoint::serve(Some(accepts)).await
    }

    /// An endpoint that takes connections and never answers.
    pub async fn hanging() -> TokenEndpoint {
        TokenEndpoint::serve(None).await
    }

    async fn serve(accepts: Option<Accepts>) -> TokenEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let expires_in = Arc::new(AtomicU64::new(3600));
        let (s, e) = (Arc::clone(&state), Arc::clone(&expires_in));
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let Some(accepts) = accepts.clone() else {
                    held.push(tcp); // never answered
                    continue;
                };
                let (s, e) = (Arc::clone(&s), Arc::clone(&e));
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let (s, e, accepts) = (Arc::clone(&s), Arc::clone(&e), accepts.clone());
                    async move {
                        let body = request.into_body().collect().await?.to_bytes();
                        let expires_in = e.load(Ordering::Relaxed);
                        let (status, json) = answer(&accepts, &body, expires_in, &s);
                        let response = hyper::Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(json)))
                            .unwrap();
                        Ok::<_, hyper::Error>(response)
                    }
                });
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        TokenEndpoint {
            addr,
            state,
            expires_in,
            task,
        }
    }

    /// `http://127.0.0.1:<port>/token`, for `token_url`.
    pub fn url(&self) -> String {
        format!("http://{}/token", self.addr)
    }

    /// The `expires_in` of the tokens issued from now on.
    pub fn set_expires_in(&self, seconds: u64) {
        self.expires_in.store(seconds, Ordering::Relaxed);
    }

    pub fn requests(&self) -> Vec<TokenRequest> {
        self.state.lock().unwrap().requests.clone()
    }

    /// From now on, every token issued so far is refused by the upstream.
    pub fn revoke_all(&self) {
        let mut state = self.state.lock().unwrap();
        let issued: Vec<String> = state.issued.keys().cloned().collect();
        state.revoked.extend(issued);
    }

    /// Whether `token` is good for logging in as `user`: issued here, for that mailbox (or
    /// for any), not revoked.
    pub fn is_valid(&self, user: &str, token: &str) -> bool {
        let state = self.state.lock().unwrap();
        if state.revoked.iter().any(|r| r == token) {
            return false;
        }
        match state.issued.get(token) {
            Some(Some(subject)) => subject.eq_ignore_ascii_case(user),
            Some(None) => true,
            None => false,
        }
    }

    /// A check for `TestUpstream::require_xoauth2`: tokens valid here.
    pub fn checker(self: &Arc<Self>) -> TokenCheck {
        let endpoint = Arc::clone(self);
        Arc::new(move |user: &str, token: &str| endpoint.is_valid(user, token))
    }
}

fn form(body: &[u8]) -> HashMap<String, String> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// The endpoint's answer to one POST: a token, or an error as RFC 6749 5.2 writes it.
fn answer(accepts: &Accepts, body: &[u8], expires_in: u64, state: &Mutex<State>) -> (u16, String) {
    let form = form(body);
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    let grant_type = field("grant_type");
    let judged: Result<Option<String>, String> = match accepts {
        Accepts::Secret {
            client_id,
            secret,
            scope,
        } => {
            if grant_type != "client_credentials" {
                Err("unsupported_grant_type".into())
            } else if field("client_id") != *client_id || field("client_secret") != *secret {
                Err("invalid_client".into())
            } else if field("scope") != *scope {
                Err("invalid_scope".into())
            } else {
                Ok(None)
            }
        }
        Accepts::ServiceAccount { public_pem, scope } => {
            check_assertion(&grant_type, &field("assertion"), public_pem, scope).map(Some)
        }
    };
    let mut state = state.lock().unwrap();
    let n = state.requests.len() + 1;
    let subject = judged.as_ref().ok().cloned().flatten();
    let answer = judged.map(|subject| {
        let token = format!("tok-{n}");
        state.issued.insert(token.clone(), subject);
        token
    });
    state.requests.push(TokenRequest {
        grant_type,
        subject,
        answer: answer.clone(),
    });
    match answer {
        Ok(token) => (
            200,
            serde_json::json!({
                "access_token": token,
                "token_type": "Bearer",
                "expires_in": expires_in,
            })
            .to_string(),
        ),
        Err(error) => (
            400,
            serde_json::json!({ "error": error, "error_description": "refused by the stand-in" })
                .to_string(),
        ),
    }
}

/// Google's `jwt-bearer` grant: RS256 by the key's public half, the stand-in's own URL as
/// audience (it is what the relay was told), the scope asked for, the service account as
/// issuer; the token is for `sub`.
fn check_assertion(
    grant_type: &str,
    assertion: &str,
    public_pem: &str,
    scope: &str,
) -> Result<String, String> {
    use jsonwebtoken::{decode, Algorithm, DecodingKey, Validation};
    if grant_type != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
        return Err("unsupported_grant_type".into());
    }
    let key = DecodingKey::from_rsa_pem(public_pem.as_bytes()).map_err(|e| e.to_string())?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.validate_aud = false;
    validation.set_required_spec_claims(&["exp", "iat", "aud"]);
    let claims = decode::<serde_json::Value>(assertion, &key, &validation)
        .map_err(|e| format!("invalid_grant: {e}"))?
        .claims;
    let claim = |name: &str| claims[name].as_str().unwrap_or_default().to_string();
    let aud = claim("aud");
    let loopback_token_url = aud.starts_with("http://127.0.0.1:") && aud.ends_with("/token");
    if claim("iss") != CLIENT_EMAIL || claim("scope") != scope || !loopback_token_url {
        return Err("invalid_grant".into());
    }
    Ok(claim("sub"))
}
