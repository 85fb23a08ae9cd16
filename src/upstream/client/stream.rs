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

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::StartTls(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Implicit(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::StartTls(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Implicit(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::StartTls(s) => Pin::new(s).poll_flush(cx),
            Stream::Implicit(s) => Pin::new(s).poll_flush(cx),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::StartTls(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Implicit(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Gone => Poll::Ready(Ok(())),
        }
    }
}
