//! Where SNS's signing certificates come from, and the GET that confirms a subscription. In
//! production both are fetched from the URL the message names, once `sns_signature` has
//! found it on `https://sns.<region>.amazonaws.com`. The tests' constructor keeps that check
//! and fetches the same path from a local server instead; no config key reaches it.
//!
//! A certificate is fetched with a timeout and a size bound, without following redirects
//! (a redirect could leave SNS's host), over rustls on aws-lc-rs trusting the system's roots,
//! and the public keys of the last few are kept. Whoever can post can name certificates, so
//! the fetches are bounded: one at a time per certificate (posts naming it meanwhile wait for
//! that one's result), at most [`MAX_FETCHES`] at once in all (a post that would start one
//! more is answered 503, and SNS tries again later).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};

use super::sns_signature::{self, SignatureError, SnsMessage};

/// Certificates kept: SNS signs with one per region at a time, and rotates it rarely.
pub const CACHED_CERTIFICATES: usize = 8;
/// Largest certificate read (SNS's is about 2 KiB of PEM).
pub const MAX_CERTIFICATE_BYTES: u64 = 64 * 1024;
/// Largest confirmation answer read (and dropped).
const MAX_CONFIRMATION_BYTES: u64 = 64 * 1024;
/// How long one fetch may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Fetches (certificates and confirmations) in flight at once, each on a blocking thread.
pub const MAX_FETCHES: usize = 4;

/// Why a message was not verified (or a subscription not confirmed).
#[derive(Debug, Clone, thiserror::Error)]
pub enum VerifyError {
    /// Not SNS's, or not for SNS's host, or too old: answered 403.
    #[error(transparent)]
    Refused(#[from] SignatureError),
    /// SNS could not be asked (a certificate or confirmation fetch failed): answered 502,
    /// so SNS tries again later.
    #[error("fetching {url}: {error}")]
    Fetch { url: String, error: Arc<FetchError> },
    /// [`MAX_FETCHES`] fetches are in flight: answered 503, so SNS tries again later.
    #[error("{MAX_FETCHES} fetches from SNS in flight already")]
    Busy,
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

/// One certificate's fetch, its result shared by every post that waited for it.
type Flight = Arc<OnceCell<Result<Arc<[u8]>, VerifyError>>>;

/// A post on a flight. When the first one leaves (answered, or given up by its client), the
/// flight leaves the table: the posts still on it get its result, later posts read the kept
/// key or (after a failure) fetch again; no flight stays behind for a post that is gone.
struct Aboard<'a> {
    verifier: &'a SnsVerifier,
    url: &'a str,
    flight: Flight,
}

impl Drop for Aboard<'_> {
    fn drop(&mut self) {
        let mut flights = self.verifier.lock_flights();
        if flights
            .get(self.url)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
        {
            flights.remove(self.url);
        }
    }
}

pub struct SnsVerifier {
    origin: Origin,
    agent: OnceLock<ureq::Agent>,
    /// Checked certificate URL -> its public key, newest last.
    keys: Mutex<VecDeque<(String, Arc<[u8]>)>>,
    /// Certificate URL -> its fetch in flight.
    flights: Mutex<HashMap<String, Flight>>,
    /// One permit per fetch in flight.
    fetches: Arc<Semaphore>,
    /// The time notifications are aged against: the system's, or a test's fixed one.
    now: Option<SystemTime>,
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

    /// For tests only: notifications are aged against `now` instead of the system's time
    /// (the signed fixtures keep the time they were signed at).
    #[cfg(any(test, feature = "test-support"))]
    pub fn at(mut self, now: SystemTime) -> SnsVerifier {
        self.now = Some(now);
        self
    }

    fn with_origin(origin: Origin) -> SnsVerifier {
        SnsVerifier {
            origin,
            agent: OnceLock::new(),
            keys: Mutex::new(VecDeque::new()),
            flights: Mutex::new(HashMap::new()),
            fetches: Arc::new(Semaphore::new(MAX_FETCHES)),
            now: None,
        }
    }

    /// Whether `message` was signed by SNS, lately: its certificate URL and its age checked
    /// first, the certificate fetched (or kept from before), then the signature.
    pub async fn verify(&self, message: &SnsMessage) -> Result<(), VerifyError> {
        let signed = sns_signature::signed(message)?;
        sns_signature::fresh(message, self.now.unwrap_or_else(SystemTime::now))?;
        let key = self.key(&signed.cert_url).await?;
        Ok(signed.verify(message, &key)?)
    }

    /// The public key of the certificate at `url` (checked): kept from before, or fetched
    /// by one post while the others naming it wait for that fetch's result.
    async fn key(&self, url: &http::Uri) -> Result<Arc<[u8]>, VerifyError> {
        let text = url.to_string();
        if let Some(key) = self.cached(&text) {
            return Ok(key);
        }
        let flight = self.lock_flights().entry(text.clone()).or_default().clone();
        let aboard = Aboard {
            verifier: self,
            url: &text,
            flight,
        };
        aboard
            .flight
            .get_or_init(|| self.fetch_key(url))
            .await
            .clone()
    }

    async fn fetch_key(&self, url: &http::Uri) -> Result<Arc<[u8]>, VerifyError> {
        let pem = self.get(url, MAX_CERTIFICATE_BYTES).await?;
        let key: Arc<[u8]> = sns_signature::public_key(&pem)?.into();
        self.keep(url.to_string(), key.clone());
        Ok(key)
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

    fn lock_flights(&self) -> std::sync::MutexGuard<'_, HashMap<String, Flight>> {
        self.flights.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fetches in flight now.
    pub fn fetching(&self) -> usize {
        MAX_FETCHES - self.fetches.available_permits()
    }

    /// Posts waiting now for the fetch of the certificate at `url` (its one in flight).
    pub fn waiting_for(&self, url: &str) -> usize {
        (self.lock_flights().get(url)).map_or(0, |flight| Arc::strong_count(flight) - 1)
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

    /// The body of a 200 answer to a GET of `url` (already checked), at most `limit` bytes;
    /// [`VerifyError::Busy`] when [`MAX_FETCHES`] are in flight. The permit goes with the
    /// blocking thread, so a fetch whose post was given up still counts until it ends.
    async fn get(&self, url: &http::Uri, limit: u64) -> Result<Vec<u8>, VerifyError> {
        let permit: OwnedSemaphorePermit =
            (self.fetches.clone().try_acquire_owned()).map_err(|_| VerifyError::Busy)?;
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
            let _permit = permit;
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
        fetched.map_err(|error| VerifyError::Fetch {
            url: shown,
            error: Arc::new(error),
        })
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

    /// A post given up while its certificate is fetched leaves no flight behind (the fetch
    /// itself ends by its timeout, its permit with it).
    #[tokio::test]
    async fn a_post_given_up_mid_fetch_leaves_no_flight() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", silent.local_addr().unwrap());
        let signed_at = std::time::UNIX_EPOCH + Duration::from_secs(1_796_119_201);
        let verifier = Arc::new(SnsVerifier::local(&base).at(signed_at));
        let message: SnsMessage = serde_json::from_str(V2).unwrap();
        let url = message.signing_cert_url.clone().unwrap();
        let post = {
            let verifier = verifier.clone();
            tokio::spawn(async move { verifier.verify(&message).await })
        };
        while verifier.waiting_for(&url) == 0 {
            tokio::task::yield_now().await;
        }
        post.abort();
        assert!(post.await.unwrap_err().is_cancelled());
        assert_eq!(verifier.waiting_for(&url), 0);
        assert!(verifier.lock_flights().is_empty());
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
