//! The admin endpoint's accept loop, with bounds of its own: anyone who reaches the port can
//! open connections, so at most `max_connections` are served at once (one more gets 503 and
//! is closed at once, holding no file descriptor the SMTP listener needs), and a request's
//! header, an idle connection's next one, and a request's body must each arrive within
//! `request_timeout_ms`, so a half-sent request cannot hold its connection for long.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::admin::host::Listening;
use crate::config::AdminConfig;
use crate::state::shutdown::Shutdown;

/// What a connection past `max_connections` is told before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\
content-type: text/plain\r\ncontent-length: 30\r\n\r\ntoo many admin connections now\n";

/// The bounds of the admin endpoint's connections.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_connections: usize,
    pub request_timeout: Duration,
}

impl Bounds {
    pub fn of(admin: &AdminConfig) -> Bounds {
        Bounds {
            max_connections: admin.max_connections.get(),
            request_timeout: Duration::from_millis(admin.request_timeout_ms.get()),
        }
    }
}

/// Serves `router` on `listener` until `shutdown` fires; then each connection ends after the
/// request it is answering.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    bounds: Bounds,
    mut shutdown: Shutdown,
) -> std::io::Result<()> {
    let listening = Listening(listener.local_addr()?);
    let slots = Arc::new(Semaphore::new(bounds.max_connections));
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "admin: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // A fresh socket's send buffer takes the answer whole: no task, no wait.
            let _ = stream.try_write(BUSY);
            tracing::warn!(%peer, "admin: connection refused, max_connections reached");
            continue;
        };
        let served = connection(
            stream,
            (peer, listening),
            router.clone(),
            bounds,
            shutdown.clone(),
            slot,
        );
        connections.spawn(served);
    }
    connections.close();
    connections.wait().await;
    Ok(())
}

/// One connection, HTTP/1.1, its slot held until it closes; each request carries the
/// client's address and the listener's (for `guard` and `host`).
async fn connection(
    stream: TcpStream,
    (peer, listening): (SocketAddr, Listening),
    router: Router,
    bounds: Bounds,
    mut shutdown: Shutdown,
    _slot: OwnedSemaphorePermit,
) {
    let timeout = bounds.request_timeout;
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let mut request = request.map(|body| Body::new(Deadline::new(body, timeout)));
        request.extensions_mut().insert(ConnectInfo(peer));
        request.extensions_mut().insert(listening);
        router.clone().oneshot(request)
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(timeout);
    let served = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    tokio::select! {
        _ = served.as_mut() => return,
        _ = shutdown.wait() => served.as_mut().graceful_shutdown(),
    }
    let _ = served.await;
}

/// A request body that must arrive whole by a deadline; past it, reading it fails (and the
/// handler's answer closes the connection).
struct Deadline {
    body: Incoming,
    by: Pin<Box<Sleep>>,
}

impl Deadline {
    fn new(body: Incoming, within: Duration) -> Deadline {
        Deadline {
            body,
            by: Box::pin(tokio::time::sleep(within)),
        }
    }
}

/// The body did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the admin endpoint's request_timeout_ms")]
pub struct BodyTimedOut;

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.by.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
