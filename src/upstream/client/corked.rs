//! The upstream socket under the client, holding small writes until the relay waits for a
//! reply.
//!
//! Each piece written on its own (a command, the body, the final dot, a TLS record) would be a
//! `write` system call, a TCP segment and a wake-up of upstream. Here a write of less than
//! [`HOLD`] bytes is kept, and what is kept goes out in one `write` when the client next reads
//! (every SMTP exchange ends in a read of the reply) or once it would grow past `HOLD`. A
//! flush does not send it: the client flushes after every piece, which would undo the joining.
//!
//! When the held bytes cannot be written, the read fails with [`Unsent`] inside: the caller
//! then knows upstream has not received them (the final dot among them).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Writes shorter than this are held (a small message and its final dot go as one); longer
/// ones go at once, after what is held. A pooled connection holds at most this much.
pub const HOLD: usize = 16 * 1024;

/// The marker inside the read error of a connection that could not write what it held.
#[derive(Debug, thiserror::Error)]
#[error("upstream connection failed while writing: {0}")]
pub struct Unsent(io::Error);

impl Unsent {
    /// Whether `error`, or an error it was caused by, is a failed write of held bytes.
    pub fn within(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut next = Some(error);
        while let Some(e) = next {
            if e.downcast_ref::<Unsent>().is_some() {
                return true;
            }
            let inner = e.downcast_ref::<io::Error>().and_then(|io| io.get_ref());
            if inner.is_some_and(|inner| inner.is::<Unsent>()) {
                return true;
            }
            next = e.source();
        }
        false
    }
}

pub struct Corked {
    tcp: TcpStream,
    held: Vec<u8>,
    /// Bytes of `held` already written.
    sent: usize,
}

impl Corked {
    pub fn new(tcp: TcpStream) -> Corked {
        Corked {
            tcp,
            held: Vec::new(),
            sent: 0,
        }
    }

    /// Writes out what is held; `Ready(Ok)` once all of it went.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.held.len() {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, &self.held[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.held.clear();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Corked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.held.len() + buf.len() > HOLD {
            ready!(this.poll_send(cx))?;
        }
        if buf.len() >= HOLD {
            return Pin::new(&mut this.tcp).poll_write(cx, buf);
        }
        this.held.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

impl AsyncRead for Corked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = ready!(this.poll_send(cx)) {
            return Poll::Ready(Err(io::Error::new(e.kind(), Unsent(e))));
        }
        Pin::new(&mut this.tcp).poll_read(cx, buf)
    }
}

impl fmt::Debug for Corked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Corked")
            .field("tcp", &self.tcp)
            .field("held", &(self.held.len() - self.sent))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    async fn pair() -> (Corked, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (Corked::new(client.unwrap()), accepted.unwrap().0)
    }

    /// On loopback a written byte is at the peer when `write` returns, so "nothing to read"
    /// right after the flushes means nothing was written.
    #[tokio::test]
    async fn small_writes_wait_for_the_next_read_and_go_as_one() {
        let (mut corked, mut peer) = pair().await;
        corked.write_all(b"Subject: s\r\n\r\nbody").await.unwrap();
        corked.flush().await.unwrap();
        corked.write_all(b"\r\n.\r\n").await.unwrap();
        corked.flush().await.unwrap();
        let mut got = [0u8; 64];
        let held = peer.try_read(&mut got);
        assert!(
            matches!(&held, Err(e) if e.kind() == io::ErrorKind::WouldBlock),
            "{held:?}"
        );
        let reader = tokio::spawn(async move {
            let mut reply = [0u8; 8];
            let n = corked.read(&mut reply).await.unwrap();
            reply[..n].to_vec()
        });
        let n = peer.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"Subject: s\r\n\r\nbody\r\n.\r\n", "in one read");
        peer.write_all(b"250 ok\r\n").await.unwrap();
        assert_eq!(reader.await.unwrap(), b"250 ok\r\n");
    }

    /// A large write goes at once, after what is held and in order; what is held stays
    /// below `HOLD`.
    #[tokio::test]
    async fn a_large_write_goes_after_what_is_held_and_nothing_grows_past_hold() {
        let (mut corked, mut peer) = pair().await;
        corked.write_all(b"MAIL FROM:<a@x>\r\n").await.unwrap();
        corked.write_all(&vec![b'x'; 2 * HOLD]).await.unwrap();
        assert!(corked.held.len() < HOLD);
        let reader = tokio::spawn(async move {
            let mut reply = [0u8; 8];
            let n = corked.read(&mut reply).await.unwrap();
            reply[..n].to_vec()
        });
        let mut got = vec![0u8; 17 + 2 * HOLD];
        peer.read_exact(&mut got).await.unwrap();
        assert!(got.starts_with(b"MAIL FROM:<a@x>\r\nxxx") && got.ends_with(b"xxx"));
        peer.write_all(b"354 go\r\n").await.unwrap();
        assert_eq!(reader.await.unwrap(), b"354 go\r\n");
    }

    /// Held bytes that cannot be written fail the read with `Unsent` inside: the caller knows
    /// upstream never got them.
    #[tokio::test]
    async fn held_bytes_that_cannot_go_fail_the_read_as_unsent() {
        let (mut corked, peer) = pair().await;
        peer.set_zero_linger().unwrap();
        drop(peer); // a reset
        corked.write_all(b"\r\n.\r\n").await.unwrap();
        let err = corked.read(&mut [0u8; 8]).await.unwrap_err();
        assert!(Unsent::within(&err), "{err:?}");
        let plain = io::Error::from(io::ErrorKind::ConnectionReset);
        assert!(!Unsent::within(&plain));
    }
}
