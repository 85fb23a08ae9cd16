//! A webhook receiver on 127.0.0.1 over HTTPS with a test certificate (`tls::TestCert`): it
//! records each POST (its signature header and body) and answers with the status the test
//! sets; or a receiver that accepts connections and never answers (`Receiver::hanging`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::tls::TestCert;

/// One POST as the receiver got it.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub path: String,
    pub signature: String,
    pub body: Vec<u8>,
}

impl Delivery {
    /// The events of its body.
    pub fn events(&self) -> Vec<serde_json::Value> {
        let batch: serde_json::Value = serde_json::from_slice(&self.body).expect("JSON body");
        batch["events"].as_array().expect("an events array").clone()
    }
}

pub struct Receiver {
    pub addr: SocketAddr,
    pub cert: TestCert,
    got: Arc<Mutex<Vec<Delivery>>>,
    status: Arc<AtomicU16>,
    /// Connections accepted so far.
    connections: Arc<AtomicUsize>,
    /// Answers with `Connection: close` (and closes) when set.
    close: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// A receiver answering 200 until told otherwise.
    pub async fn start() -> Receiver {
        Receiver::serve(true).await
    }

    /// A receiver that takes connections and never answers (not even TLS).
    pub async fn hanging() -> Receiver {
        Receiver::serve(false).await
    }

    async fn serve(answers: bool) -> Receiver {
        let cert = TestCert::new();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(AtomicU16::new(200));
        let acceptor = acceptor(&cert);
        let (connections, close) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (g, s, n, c) = (
            got.clone(),
            status.clone(),
            connections.clone(),
            close.clone(),
        );
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                n.fetch_add(1, Ordering::SeqCst);
                if !answers {
                    held.push(tcp);
                    continue;
                }
                let (acceptor, got, status, close) =
                    (acceptor.clone(), g.clone(), s.clone(), c.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = service_fn(move |request| {
                        let (got, status, close) = (got.clone(), status.clone(), close.clone());
                        async move { record(request, &got, &status, &close).await }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Receiver {
            addr,
            cert,
            got,
            status,
            connections,
            close,
            task,
        }
    }

    /// The status it answers with from now on.
    pub fn answer(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// Connections it accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Whether it closes each connection after its answer (`Connection: close`).
    pub fn close_each(&self, close: bool) {
        self.close.store(close, Ordering::SeqCst);
    }

    /// The POSTs it got so far.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.got.lock().unwrap().clone()
    }

    /// Every event of every POST, in order.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.deliveries()
            .iter()
            .flat_map(Delivery::events)
            .collect()
    }

    /// A `[[webhook]]` table posting to it (`/hook`), trusting its certificate, with `extra`.
    pub fn config(&self, tenant: &str, secret_env: &str, extra: &str) -> String {
        format!(
            "[[webhook]]\ntenant = \"{tenant}\"\nurl = \"https://127.0.0.1:{}/hook\"\n\
             secret_env = \"{secret_env}\"\nallow_networks = [\"127.0.0.0/8\"]\n\
             ca_file = \"{}\"\n{extra}\n",
            self.addr.port(),
            self.cert.cert_path.display()
        )
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(
    request: hyper::Request<hyper::body::Incoming>,
    got: &Mutex<Vec<Delivery>>,
    status: &AtomicU16,
    close: &AtomicBool,
) -> Result<hyper::Response<Full<Bytes>>, hyper::Error> {
    let path = request.uri().path().to_string();
    let signature = (request.headers().get("Mailsluice-Signature"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = request.into_body().collect().await?.to_bytes().to_vec();
    got.lock().unwrap().push(Delivery {
        path,
        signature,
        body,
    });
    let mut response = hyper::Response::new(Full::new(Bytes::new()));
    *response.status_mut() = hyper::StatusCode::from_u16(status.load(Ordering::SeqCst)).unwrap();
    if close.load(Ordering::SeqCst) {
        let value = hyper::header::HeaderValue::from_static("close");
        response
            .headers_mut()
            .insert(hyper::header::CONNECTION, value);
    }
    Ok(response)
}

fn acceptor(cert: &TestCert) -> TlsAcceptor {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert.cert_path)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&cert.key_path).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    TlsAcceptor::from(Arc::new(config))
}

/// The receiver's check of docs/webhooks.md, in Rust: the signature over `"<t>.<body>"` with
/// `secret`, and `t` within `tolerance` seconds of `now`.
pub fn verified(secret: &[u8], header: &str, body: &[u8], tolerance: u64, now: u64) -> bool {
    use hmac::{Hmac, KeyInit, Mac};
    let fields: std::collections::HashMap<&str, &str> = (header.split(','))
        .filter_map(|p| p.split_once('='))
        .collect();
    let (Some(Ok(t)), Some(v1)) = (fields.get("t").map(|t| t.parse::<u64>()), fields.get("v1"))
    else {
        return false;
    };
    if now.abs_diff(t) > tolerance {
        return false;
    }
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let hex: String = (mac.finalize().into_bytes().iter())
        .map(|b| format!("{b:02x}"))
        .collect();
    hex == *v1
}
