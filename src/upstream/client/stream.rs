//! The socket under a client connection: plain (its writes corked, see `corked`), TLS
//! after STARTTLS (its records through the same cork), or TLS from the first byte.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::corked::Corked;

pub(super) enum Stream {
    Plain(Corked),
    StartTls(Box<TlsStream<Corked>>),
    Implicit(Box<TlsStream<TcpStream>>),
    /// Taken apart for a STARTTLS handshake that failed: nothing can go on it.
    Gone,
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "connection given up")
}

/// What each kind of stream is underneath.
trait Io: AsyncRead + AsyncWrite + Unpin {}
impl<T: AsyncRead + AsyncWrite + Unpin> Io for T {}

impl Stream {
    /// The socket under it; `None` once given up.
    fn io(self: Pin<&mut Self>) -> Option<Pin<&mut dyn Io>> {
        match self.get_mut() {
            Stream::Plain(s) => Some(Pin::new(s)),
            Stream::StartTls(s) => Some(Pin::new(s.as_mut())),
            Stream::Implicit(s) => Some(Pin::new(s.as_mut())),
            Stream::Gone => None,
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.io() {
            Some(io) => io.poll_read(cx, buf),
            None => Poll::Ready(Err(gone())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.io() {
            Some(io) => io.poll_write(cx, buf),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.io() {
            Some(io) => io.poll_flush(cx),
            None => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.io() {
            Some(io) => io.poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}
