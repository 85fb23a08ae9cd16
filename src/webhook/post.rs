//! One POST to a webhook's URL: its host resolved and each address checked against the
//! webhook's rules before any connection (a host name is checked here, where DNS answers, as
//! an address literal was at load), then HTTP/1.1 over rustls (the process's aws-lc-rs
//! provider, the system's roots and the webhook's `ca_file`), one connection per POST: a
//! batch is the unit of reuse.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::sign::HEADER;
use crate::config::{WebhookConfig, WebhookUrl};

/// Why a POST did not get a 2xx.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// The receiver answered, and not with a 2xx or a 5xx: the batch is not sent again.
    #[error("the receiver answered {0}")]
    Refused(u16),
    /// A 5xx: sent again after a pause.
    #[error("the receiver answered {0}")]
    Failing(u16),
    /// No answer within `timeout_ms`: sent again.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// No connection, or it broke: sent again.
    #[error("{0}")]
    Connection(String),
    /// Every address of its host is one the webhook may not reach: not sent again.
    #[error("{0} resolves only to addresses it may not reach ({1})")]
    NotAllowed(String, String),
}

impl PostError {
    /// Whether the same batch is worth sending again.
    pub fn retried(&self) -> bool {
        matches!(
            self,
            PostError::Failing(_) | PostError::Timeout(_) | PostError::Connection(_)
        )
    }
}

/// What a webhook's POSTs go with.
pub struct Poster {
    config: WebhookConfig,
    url: WebhookUrl,
    tls: TlsConnector,
}

impl Poster {
    /// The poster of `config` (its URL was checked at load); `roots` are the system's.
    pub fn new(config: &WebhookConfig, roots: &[CertificateDer<'static>]) -> Option<Poster> {
        let url = config.target().ok()?;
        let mut store = rustls::RootCertStore::empty();
        store.add_parsable_certificates(roots.iter().cloned());
        let extra = config
            .ca_certs
            .iter()
            .map(|c| CertificateDer::from(c.clone()));
        store.add_parsable_certificates(extra);
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(store)
            .with_no_client_auth();
        Some(Poster {
            config: config.clone(),
            url,
            tls: TlsConnector::from(Arc::new(tls)),
        })
    }

    /// POSTs `body` signed with `signature`; `Ok` on a 2xx, with its code.
    pub async fn post(&self, body: Bytes, signature: &str) -> Result<u16, PostError> {
        let timeout = Duration::from_millis(self.config.timeout_ms.get());
        tokio::time::timeout(timeout, self.exchange(body, signature))
            .await
            .map_err(|_| PostError::Timeout(timeout))?
    }

    async fn exchange(&self, body: Bytes, signature: &str) -> Result<u16, PostError> {
        let tcp = self.connect().await?;
        let _ = tcp.set_nodelay(true);
        let request = self.request(body, signature)?;
        let status = match self.url.https {
            true => {
                let name = ServerName::try_from(self.url.host.clone())
                    .map_err(|e| PostError::Connection(e.to_string()))?;
                let tls = (self.tls.connect(name, tcp).await)
                    .map_err(|e| PostError::Connection(format!("TLS: {e}")))?;
                send(tls, request).await?
            }
            false => send(tcp, request).await?,
        };
        match status {
            200..=299 => Ok(status),
            500..=599 => Err(PostError::Failing(status)),
            _ => Err(PostError::Refused(status)),
        }
    }

    /// A connection to the first address of the host that the webhook may reach.
    async fn connect(&self) -> Result<TcpStream, PostError> {
        let (host, port) = (self.url.host.as_str(), self.url.port);
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| PostError::Connection(format!("{host}: {e}")))?
            .collect();
        let allowed = addresses
            .iter()
            .filter(|a| self.config.may_reach(self.url.https, a.ip()));
        let mut last = None;
        for address in allowed {
            match TcpStream::connect(address).await {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(format!("{address}: {e}")),
            }
        }
        Err(match last {
            Some(error) => PostError::Connection(error),
            None => {
                let list: Vec<String> = addresses.iter().map(|a| a.ip().to_string()).collect();
                PostError::NotAllowed(host.to_string(), list.join(", "))
            }
        })
    }

    fn request(
        &self,
        body: Bytes,
        signature: &str,
    ) -> Result<http::Request<Full<Bytes>>, PostError> {
        let url = &self.url;
        let host = match url.host.contains(':') {
            true => format!("[{}]", url.host),
            false => url.host.clone(),
        };
        let default_port = if url.https { 443 } else { 80 };
        let authority = match url.port == default_port {
            true => host,
            false => format!("{host}:{}", url.port),
        };
        http::Request::post(url.path.as_str())
            .header(http::header::HOST, authority)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::USER_AGENT, "mailsluice")
            .header(HEADER, signature)
            .body(Full::new(body))
            .map_err(|e| PostError::Connection(e.to_string()))
    }
}

/// The request over `io`, HTTP/1.1; the response's status (its body is not read).
async fn send<S>(io: S, request: http::Request<Full<Bytes>>) -> Result<u16, PostError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let broke = |e: hyper::Error| PostError::Connection(e.to_string());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(broke)?;
    let conn = tokio::spawn(conn);
    let response = sender.send_request(request).await;
    conn.abort();
    Ok(response.map_err(broke)?.status().as_u16())
}
