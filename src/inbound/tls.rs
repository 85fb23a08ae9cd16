//! Inbound TLS (STARTTLS on `listen`, implicit TLS on `tls_listen`): loading the PEM
//! certificate and key, building the rustls server config on the one crypto provider of the
//! process (aws-lc-rs, the one lettre uses upstream), and swapping it on SIGHUP.
//!
//! The live config sits behind a lock holding an `Arc`: a handshake clones the `Arc` and runs
//! on it, so `reload` never waits for a handshake and never disturbs a connection that is
//! already encrypted. A reload that fails (file half-written, key not matching) keeps the
//! old certificate and says why, so a bad renewal never takes TLS down.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ServerConfig;
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// Why the certificate or key could not be used. The text names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: no PEM certificate (-----BEGIN CERTIFICATE-----) found", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no PEM private key (PKCS#8, PKCS#1 or SEC1) found", path.display())]
    NoKey { path: PathBuf },
    #[error("{}: bad PEM: {message}", path.display())]
    BadPem { path: PathBuf, message: String },
    #[error("{}: an RSA key of {bits} bits; TLS takes {MIN_RSA_BITS} at least", path.display())]
    WeakKey { path: PathBuf, bits: usize },
    #[error("the private key {} does not match the certificate {}", key.display(), cert.display())]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error("cannot use the certificate {}: {source}", cert.display())]
    Rustls {
        cert: PathBuf,
        source: rustls::Error,
    },
}

/// The inbound TLS setup of one relay: where its files are and the config built from them.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<ServerConfig>>,
    handshake_timeout: Duration,
}

impl Tls {
    /// Reads the files named by `[smtp.tls]`; any problem is a startup error.
    pub fn load(config: &TlsConfig) -> Result<Tls, TlsError> {
        let server = server_config(&config.cert, &config.key)?;
        Ok(Tls {
            cert: config.cert.clone(),
            key: config.key.clone(),
            current: RwLock::new(Arc::new(server)),
            handshake_timeout: Duration::from_millis(config.handshake_timeout_ms.get()),
        })
    }

    /// Reads the certificate and key again (SIGHUP, after a renewal). New handshakes use
    /// them; connections already up keep theirs. On error the old ones stay in use.
    /// The certificate file, as configured (a reload with other paths loads anew).
    pub fn cert(&self) -> &std::path::Path {
        &self.cert
    }

    pub fn key(&self) -> &std::path::Path {
        &self.key
    }

    pub fn reload(&self) -> Result<(), TlsError> {
        let server = Arc::new(server_config(&self.cert, &self.key)?);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = server;
        Ok(())
    }

    /// The config new handshakes use.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Runs the server side of a handshake, bounded by `handshake_timeout_ms`: a client that
    /// stalls or sends garbage gets an error, never a session.
    pub async fn accept<S>(&self, stream: S) -> std::io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let acceptor = TlsAcceptor::from(self.current());
        match tokio::time::timeout(self.handshake_timeout, acceptor.accept(stream)).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        }
    }
}

/// Builds the rustls server config from PEM files, checking that the key is the
/// certificate's, so a mismatch is reported at startup instead of at every handshake.
pub fn server_config(cert_path: &Path, key_path: &Path) -> Result<ServerConfig, TlsError> {
    let cert_pem = read(cert_path)?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_pem(cert_path, e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_owned(),
        });
    }
    if let Some(bits) = rsa_bits(&certs[0]).filter(|&bits| bits < MIN_RSA_BITS) {
        return Err(TlsError::WeakKey {
            path: cert_path.to_owned(),
            bits,
        });
    }
    let key_pem = read(key_path)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoKey {
            path: key_path.to_owned(),
        },
        other => bad_pem(key_path, other),
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let rustls_err = |source| TlsError::Rustls {
        cert: cert_path.to_owned(),
        source,
    };
    let signing_key = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(rustls_err)?;
    let certified = CertifiedKey::new(certs.clone(), signing_key);
    if let Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) =
        certified.keys_match()
    {
        return Err(TlsError::Mismatch {
            cert: cert_path.to_owned(),
            key: key_path.to_owned(),
        });
    }
    ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(rustls_err)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(rustls_err)
}

/// The shortest RSA key the crypto provider (aws-lc-rs) signs with: a shorter one fails at
/// load with a text that does not say why.
pub const MIN_RSA_BITS: usize = 2048;

/// The length of the certificate's RSA key, when it is one.
fn rsa_bits(cert: &CertificateDer<'_>) -> Option<usize> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    match cert.public_key().parsed().ok()? {
        x509_parser::public_key::PublicKey::RSA(rsa) => Some(rsa.key_size()),
        _ => None,
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn bad_pem(path: &Path, e: pem::Error) -> TlsError {
    TlsError::BadPem {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    fn tempdir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "mailsluice-tls-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn config(cert: &Path, key: &Path) -> TlsConfig {
        TlsConfig {
            cert: cert.to_owned(),
            key: key.to_owned(),
            handshake_timeout_ms: std::num::NonZeroU64::new(1000).unwrap(),
        }
    }

    #[test]
    fn matching_pair_loads() {
        let dir = tempdir("ok");
        let (c, k) = pair(&dir, "a");
        Tls::load(&config(&c, &k)).unwrap();
    }

    #[test]
    fn mismatched_key_is_a_clear_error() {
        let dir = tempdir("mismatch");
        let (c, _) = pair(&dir, "a");
        let (_, k) = pair(&dir, "b");
        let err = Tls::load(&config(&c, &k)).err().unwrap();
        assert!(matches!(err, TlsError::Mismatch { .. }), "{err}");
        assert!(err.to_string().contains("does not match"), "{err}");
    }

    #[test]
    fn missing_or_empty_files_name_the_file() {
        let dir = tempdir("missing");
        let (c, k) = pair(&dir, "a");
        let err = Tls::load(&config(&dir.join("nope.crt"), &k)).err().unwrap();
        assert!(err.to_string().contains("nope.crt"), "{err}");
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        let err = Tls::load(&config(&empty, &k)).err().unwrap();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err}");
        let err = Tls::load(&config(&c, &empty)).err().unwrap();
        assert!(matches!(err, TlsError::NoKey { .. }), "{err}");
        // The certificate given as the key: no key in it.
        let err = Tls::load(&config(&c, &c)).err().unwrap();
        assert!(matches!(err, TlsError::NoKey { .. }), "{err}");
    }

    #[test]
    fn failed_reload_keeps_the_old_config() {
        let dir = tempdir("reload");
        let (c, k) = pair(&dir, "a");
        let tls = Tls::load(&config(&c, &k)).unwrap();
        let before = tls.current();
        std::fs::write(&k, "garbage").unwrap();
        assert!(tls.reload().is_err());
        assert!(Arc::ptr_eq(&before, &tls.current()));
        let (c2, k2) = pair(&dir, "b");
        std::fs::rename(c2, &c).unwrap();
        std::fs::rename(k2, &k).unwrap();
        tls.reload().unwrap();
        assert!(!Arc::ptr_eq(&before, &tls.current()));
    }
}
