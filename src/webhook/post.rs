//! One POST to a webhook's URL: its host resolved and each address checked against the
//! webhook's rules before any connection (a host name is checked here, where DNS answers, as
//! an address literal was at load), then HTTP/1.1 over rustls (the process's aws-lc-rs
//! provider, the system's roots and the webhook's `ca_file`). The connection is kept open for
//! the next POST while the receiver keeps it (a TLS handshake per batch would cost more than
//! the batch); one the receiver closed since is replaced at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::sign::HEADER;
use crate::config::{HttpUrl, WebhookConfig};

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

/// The most of a response's body read (and dropped): past it the connection is not kept.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// What a webhook's POSTs go with.
pub struct Poster {
    config: WebhookConfig,
    url: HttpUrl,
    tls: TlsConnector,
    /// The connection of the last POST, while the receiver keeps it open.
    open: tokio::sync::Mutex<Option<Open>>,
    /// Tests only: the host's name asked of the tests' own DNS server, not the system's
    /// resolver, so that a name resolving to an internal address can be tried. A feature of
    /// the tests' builds (`test-support`): a release build has no such field and no branch.
    #[cfg(feature = "test-support")]
    through: std::sync::OnceLock<hickory_resolver::TokioResolver>,
}

/// An open connection: its sender, and the task that drives it (ended with it).
struct Open {
    sender: SendRequest<Full<Bytes>>,
    conn: tokio::task::JoinHandle<()>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.conn.abort();
    }
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
            open: tokio::sync::Mutex::new(None),
            #[cfg(feature = "test-support")]
            through: std::sync::OnceLock::new(),
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
        let mut open = self.open.lock().await;
        let mut kept = open.take();
        if let Some(k) = &mut kept {
            if k.sender.ready().await.is_err() {
                kept = None;
            }
        }
        let (status, kept) = match kept {
            Some(mut kept) => match ask(&mut kept, self.request(body.clone(), signature)?).await {
                Ok((status, keep)) => (status, keep.then_some(kept)),
                // Closed by the receiver while idle: once more on a new connection.
                Err(_) => self.ask_anew(body, signature).await?,
            },
            None => self.ask_anew(body, signature).await?,
        };
        *open = kept;
        match status {
            200..=299 => Ok(status),
            500..=599 => Err(PostError::Failing(status)),
            _ => Err(PostError::Refused(status)),
        }
    }

    /// The POST on a new connection: its status, and the connection when it may be kept.
    async fn ask_anew(
        &self,
        body: Bytes,
        signature: &str,
    ) -> Result<(u16, Option<Open>), PostError> {
        let mut open = self.open_new().await?;
        let (status, keep) = ask(&mut open, self.request(body, signature)?).await?;
        Ok((status, keep.then_some(open)))
    }

    async fn open_new(&self) -> Result<Open, PostError> {
        let tcp = self.connect().await?;
        let _ = tcp.set_nodelay(true);
        match self.url.https {
            true => {
                let name = ServerName::try_from(self.url.host.clone())
                    .map_err(|e| PostError::Connection(e.to_string()))?;
                let tls = (self.tls.connect(name, tcp).await)
                    .map_err(|e| PostError::Connection(format!("TLS: {e}")))?;
                handshake(tls).await
            }
            false => handshake(tcp).await,
        }
    }

    /// A connection to the first address of the host that the webhook may reach.
    async fn connect(&self) -> Result<TcpStream, PostError> {
        let (host, port) = (self.url.host.as_str(), self.url.port);
        let addresses = self.resolve(host, port).await?;
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

    /// The addresses of `host`, from the system's resolver (in tests, from their own DNS
    /// server once `resolve_through` named it).
    async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, PostError> {
        let failed = |e: &dyn std::fmt::Display| PostError::Connection(format!("{host}: {e}"));
        #[cfg(feature = "test-support")]
        if let Some(resolver) = self.through.get() {
            let found = resolver.lookup_ip(host).await.map_err(|e| failed(&e))?;
            return Ok(found.iter().map(|ip| SocketAddr::new(ip, port)).collect());
        }
        let found = tokio::net::lookup_host((host, port)).await;
        Ok(found.map_err(|e| failed(&e))?.collect())
    }

    /// **Tests only**: host names asked of `nameservers` from now on.
    #[cfg(feature = "test-support")]
    pub fn resolve_through(&self, nameservers: &[SocketAddr]) {
        use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig};
        use hickory_resolver::net::runtime::TokioRuntimeProvider;
        let servers = nameservers.iter().map(|addr| {
            let mut server = NameServerConfig::udp_and_tcp(addr.ip());
            for connection in &mut server.connections {
                connection.port = addr.port();
            }
            server
        });
        let config = ResolverConfig::from_name_servers(servers.collect());
        let mut builder = hickory_resolver::Resolver::builder_with_config(
            config,
            TokioRuntimeProvider::default(),
        );
        builder.options_mut().use_hosts_file = ResolveHosts::Never;
        let resolver = builder
            .build()
            .expect("a resolver on the tests' name servers");
        let _ = self.through.set(resolver);
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

fn broke(e: hyper::Error) -> PostError {
    PostError::Connection(e.to_string())
}

/// HTTP/1.1 over `io`, driven by a task of its own.
async fn handshake<S>(io: S) -> Result<Open, PostError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(broke)?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(Open { sender, conn })
}

/// The request on `open`: the response's status, and whether the connection may be kept
/// (its body read whole, within its bound).
async fn ask(
    open: &mut Open,
    request: http::Request<Full<Bytes>>,
) -> Result<(u16, bool), PostError> {
    let response = open.sender.send_request(request).await.map_err(broke)?;
    let status = response.status().as_u16();
    let body = Limited::new(response.into_body(), MAX_RESPONSE_BYTES);
    Ok((status, body.collect().await.is_ok()))
}
