//! Where SNS's signing certificates come from, and the GET that confirms a subscription. In
//! production both are fetched from the URL the message names, once `sns_signature` has
//! found it on `https://sns.<region>.amazonaws.com`. The tests' constructor keeps that check
//! and fetches the same path from a local server instead; no config key reaches it.
//!
//! A certificate is fetched with a timeout and a size bound, without following redirects
//! (a redirect could leave SNS's host), over rustls on aws-lc-rs trusting the system's roots,
//! and the public keys of the last few are kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::sns_signature::{self, SignatureError, SnsMessage};

/// Certificates kept: SNS signs with one per region at a time, and rotates it rarely.
pub const CACHED_CERTIFICATES: usize = 8;
/// Largest certificate read (SNS's is about 2 KiB of PEM).
pub const MAX_CERTIFICATE_BYTES: u64 = 64 * 1024;
/// Largest confirmation answer read (and dropped).
const MAX_CONFIRMATION_BYTES: u64 = 64 * 1024;
/// How long one fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a message was not verified (or a subscription not confirmed).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Not SNS's, or not for SNS's host: answered 403.
    #[error(transparent)]
    Refused(#[from] SignatureError),
    /// SNS could not be asked (a certificate or confirmation fetch failed): answered 502,
    /// so SNS tries again later.
    #[error("fetching {url}: {error}")]
    Fetch { url: String, error: FetchError },
}

/// Why a GET of SNS's URL brought no body.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No answer, or its body could not be read (or was over the bound).
    #[error("{0}")]
    Http(ureq::Error),
    #[error("HTTP {0}")]
    Status(http::StatusCode),
    /// The blocking task that fetches was lost (the runtime is shutting down).
    #[error("{0}")]
    Task(tokio::task::JoinError),
}

/// Where the checked URLs are fetched from.
#[derive(Debug, Clone)]
enum Origin {
    /// The URL itself (on SNS's host, checked).
    Sns,
    /// The same path and query on a local test server (`http://127.0.0.1:PORT`).
    #[cfg(any(test, feature = "test-support"))]
    Local(String),
}

pub struct SnsVerifier {
    origin: Origin,
    agent: OnceLock<ureq::Agent>,
    /// Checked certificate URL -> its public key, newest last.
    keys: Mutex<VecDeque<(String, Arc<[u8]>)>>,
}

impl SnsVerifier {
    /// Fetches from SNS itself: the production verifier.
    pub fn sns() -> SnsVerifier {
        SnsVerifier::with_origin(Origin::Sns)
    }

    /// For tests only: the URLs are still checked against SNS's host, then their path and
    /// query are fetched from `base` (`http://127.0.0.1:PORT`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn local(base: &str) -> SnsVerifier {
        SnsVerifier::with_origin(Origin::Local(base.trim_end_matches('/').to_string()))
    }

    fn with_origin(origin: Origin) -> SnsVerifier {
        SnsVerifier {
            origin,
            agent: OnceLock::new(),
            keys: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether `message` was signed by SNS: its certificate URL checked first, the
    /// certificate fetched (or kept from before), then the signature.
    pub async fn verify(&self, message: &SnsMessage) -> Result<(), VerifyError> {
        let signed = sns_signature::signed(message)?;
        let url = signed.cert_url.to_string();
        let key = match self.cached(&url) {
            Some(key) => key,
            None => {
                let pem = self.get(&signed.cert_url, MAX_CERTIFICATE_BYTES).await?;
                let key: Arc<[u8]> = sns_signature::public_key(&pem)?.into();
                self.keep(url, key.clone());
                key
            }
        };
        Ok(signed.verify(message, &key)?)
    }

    /// Confirms a subscription: a GET of its `SubscribeURL`, which must be on SNS's host too.
    pub async fn confirm(&self, message: &SnsMessage) -> Result<(), VerifyError> {
        let url =
            (message.subscribe_url.as_deref()).ok_or(SignatureError::Missing("SubscribeURL"))?;
        let url = sns_signature::sns_url(url, &message.topic_arn)?;
        self.get(&url, MAX_CONFIRMATION_BYTES).await.map(|_| ())
    }

    /// Certificates kept now.
    pub fn cached_count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(String, Arc<[u8]>)>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cached(&self, url: &str) -> Option<Arc<[u8]>> {
        (self.lock().iter())
            .find(|(u, _)| u == url)
            .map(|(_, key)| key.clone())
    }

    fn keep(&self, url: String, key: Arc<[u8]>) {
        let mut keys = self.lock();
        if keys.iter().any(|(u, _)| *u == url) {
            return;
        }
        if keys.len() >= CACHED_CERTIFICATES {
            keys.pop_front();
        }
        keys.push_back((url, key));
    }

    /// The body of a 200 answer to a GET of `url` (already checked), at most `limit` bytes.
    async fn get(&self, url: &http::Uri, limit: u64) -> Result<Vec<u8>, VerifyError> {
        let target = match &self.origin {
            Origin::Sns => url.to_string(),
            #[cfg(any(test, feature = "test-support"))]
            Origin::Local(base) => {
                let path = url.path_and_query().map(|p| p.as_str()).unwrap_or("/");
                format!("{base}{path}")
            }
        };
        let agent = self.agent().clone();
        let shown = url.to_string();
        let fetch = move || -> Result<Vec<u8>, FetchError> {
            let mut response = agent.get(&target).call().map_err(FetchError::Http)?;
            if response.status() != 200 {
                return Err(FetchError::Status(response.status()));
            }
            let body = response.body_mut().with_config().limit(limit);
            body.read_to_vec().map_err(FetchError::Http)
        };
        let fetched = match tokio::task::spawn_blocking(fetch).await {
            Ok(fetched) => fetched,
            Err(e) => Err(FetchError::Task(e)),
        };
        fetched.map_err(|error| VerifyError::Fetch { url: shown, error })
    }

    /// The HTTP client, made at first use (it reads the system's roots).
    fn agent(&self) -> &ureq::Agent {
        self.agent.get_or_init(|| {
            let https_only = matches!(self.origin, Origin::Sns);
            build_agent(https_only)
        })
    }
}

/// ureq over rustls with aws-lc-rs (the process's one provider), the system's roots, no
/// redirects, a timeout on the whole exchange.
fn build_agent(https_only: bool) -> ureq::Agent {
    use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
    let roots = rustls_native_certs::load_native_certs().certs;
    let roots = roots
        .iter()
        .map(|c| Certificate::from_der(c.as_ref()).to_owned());
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::from(roots))
        .unversioned_rustls_crypto_provider(provider)
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .https_only(https_only)
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_global(Some(FETCH_TIMEOUT))
        .build()
        .new_agent()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V2: &str = include_str!("../../tests/fixtures/sns/notification-v2.json");

    #[test]
    fn at_its_bound_the_cache_forgets_the_oldest_certificate() {
        let verifier = SnsVerifier::sns();
        let key: Arc<[u8]> = Arc::from(&b"key"[..]);
        for i in 0..CACHED_CERTIFICATES + 2 {
            verifier.keep(format!("https://sns.r.amazonaws.com/{i}.pem"), key.clone());
        }
        assert_eq!(verifier.cached_count(), CACHED_CERTIFICATES);
        assert!(verifier
            .cached("https://sns.r.amazonaws.com/0.pem")
            .is_none());
        assert!(verifier
            .cached("https://sns.r.amazonaws.com/1.pem")
            .is_none());
        let newest = format!(
            "https://sns.r.amazonaws.com/{}.pem",
            CACHED_CERTIFICATES + 1
        );
        assert!(verifier.cached(&newest).is_some());
    }

    /// Off SNS's host, both verifiers refuse before any fetch: the local one points at a
    /// port nothing listens on, so a fetch would have been a `Fetch` error.
    #[tokio::test]
    async fn a_url_off_sns_host_is_refused_before_any_fetch() {
        let mut message: SnsMessage = serde_json::from_str(V2).unwrap();
        message.signing_cert_url = Some("https://127.0.0.1:1/cert.pem".into());
        message.subscribe_url = Some("https://attacker.example/confirm".into());
        for verifier in [SnsVerifier::sns(), SnsVerifier::local("http://127.0.0.1:1")] {
            for result in [
                verifier.verify(&message).await,
                verifier.confirm(&message).await,
            ] {
                assert!(
                    matches!(result, Err(VerifyError::Refused(SignatureError::Host(..)))),
                    "{result:?}"
                );
            }
            assert!(verifier.agent.get().is_none(), "no client was even made");
        }
    }
}
