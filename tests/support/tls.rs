//! Certificates for TLS tests, made with rcgen (nothing secret is committed), and a TLS
//! client that trusts exactly the certificate it is given.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mailsluice::smtp::AsyncStream;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::host::scratch_path;
use super::relay::Client;

/// A self-signed certificate for `localhost` and `127.0.0.1`, written as PEM files.
pub struct TestCert {
    pub dir: PathBuf,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
    pub der: CertificateDer<'static>,
}

impl Default for TestCert {
    fn default() -> TestCert {
        TestCert::new()
    }
}

impl TestCert {
    pub fn new() -> TestCert {
        let dir = scratch_path("test-tls");
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
        let der = write_pair(&cert_path, &key_path);
        TestCert {
            dir,
            cert_path,
            key_path,
            der,
        }
    }

    /// Replaces the files with a new pair (a renewal); returns the new certificate.
    pub fn renew(&self) -> CertificateDer<'static> {
        let (c, k) = (self.dir.join("new-cert.pem"), self.dir.join("new-key.pem"));
        let der = write_pair(&c, &k);
        std::fs::rename(c, &self.cert_path).unwrap();
        std::fs::rename(k, &self.key_path).unwrap();
        der
    }

    /// The `[smtp.tls]` table naming these files.
    pub fn config(&self, extra: &str) -> String {
        format!(
            "[smtp.tls]\ncert = \"{}\"\nkey = \"{}\"\n{extra}\n",
            self.cert_path.display(),
            self.key_path.display()
        )
    }
}

fn write_pair(cert_path: &Path, key_path: &Path) -> CertificateDer<'static> {
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let cert = params.self_signed(&key).unwrap();
    std::fs::write(cert_path, cert.pem()).unwrap();
    std::fs::write(key_path, key.serialize_pem()).unwrap();
    cert.der().clone()
}

/// A TLS client that trusts only `cert`.
pub fn connector(cert: &CertificateDer<'static>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// Runs the client side of a handshake over `stream`.
pub async fn handshake(
    stream: Box<dyn AsyncStream>,
    cert: &CertificateDer<'static>,
) -> std::io::Result<Box<dyn AsyncStream>> {
    let name = ServerName::try_from("localhost").unwrap();
    let tls = connector(cert).connect(name, stream).await?;
    Ok(Box::new(tls))
}

/// Connects to an implicit-TLS port and reads the greeting.
pub async fn connect_implicit(addr: SocketAddr, cert: &CertificateDer<'static>) -> Client {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = handshake(Box::new(tcp), cert).await.expect("TLS handshake");
    let mut c = Client::over(tls);
    assert_eq!(c.reply().await.0, 220);
    c
}

/// STARTTLS on a plaintext client: 220, then the handshake.
pub async fn starttls(mut c: Client, cert: &CertificateDer<'static>) -> Client {
    let (code, text) = c.cmd("STARTTLS").await;
    assert_eq!(code, 220, "{text}");
    Client::over(
        handshake(c.into_stream(), cert)
            .await
            .expect("TLS handshake"),
    )
}
