//! TLS towards upstream: rustls on aws-lc-rs (the process's one crypto provider). A named
//! upstream's certificate is checked against the system's roots; an MX host's is not
//! checked at all (see `mx::connections` for why), though its handshake still is.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, InvalidDnsNameError, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio_rustls::TlsConnector;

/// How to secure one upstream's connections: the rustls config and the name the server is
/// asked for (SNI) and, when checked, must hold a certificate for.
#[derive(Clone)]
pub struct Tls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("name", &self.name).finish()
    }
}

/// Why TLS towards an upstream could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    /// The crypto provider offers none of the protocol versions asked for.
    #[error("{0}")]
    Versions(rustls::Error),
    /// The host is not a name (or address) a certificate could be for.
    #[error("{0}")]
    Name(InvalidDnsNameError),
}

impl Tls {
    /// The certificate must chain to one of the system's roots and name `host`. (With no
    /// roots on the system, every handshake fails, and says why.)
    pub fn verified(host: &str) -> Result<Tls, ClientTlsError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(ClientTlsError::Versions)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Tls::with(config, host)
    }

    /// Encrypts without checking whose certificate it is (an MX host).
    pub fn unverified(host: &str) -> Result<Tls, ClientTlsError> {
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(ClientTlsError::Versions)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
            .with_no_client_auth();
        Tls::with(config, host)
    }

    fn with(config: ClientConfig, host: &str) -> Result<Tls, ClientTlsError> {
        let name = ServerName::try_from(host.to_string()).map_err(ClientTlsError::Name)?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        })
    }

    pub fn connector(&self) -> &TlsConnector {
        &self.connector
    }

    pub fn name(&self) -> ServerName<'static> {
        self.name.clone()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Accepts any certificate, but checks that the server holds its key (the handshake's
/// signatures), as an unverified TLS client still must.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
