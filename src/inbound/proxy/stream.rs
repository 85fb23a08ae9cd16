//! A client's byte stream after the PROXY header, or watched for one it may not send.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{could_open, V1_SIGNATURE, V2_SIGNATURE};

/// What the first bytes of a connection from outside `proxy_from` say, so far.
fn looks(bytes: &[u8]) -> Looks {
    if bytes.starts_with(V1_SIGNATURE) || bytes.starts_with(V2_SIGNATURE) {
        return Looks::Header;
    }
    // A line's end means a client waiting for its reply (an empty line, say): decide now.
    match could_open(bytes) && !bytes.ends_with(b"\n") {
        true => Looks::Maybe,
        false => Looks::NotHeader,
    }
}

enum Looks {
    Header,
    Maybe,
    NotHeader,
}

/// Set when a connection from outside `proxy_from` opened with a PROXY header (and was
/// closed for it): read by whoever started its session, once the session is over.
#[derive(Clone, Default)]
pub struct Attempt(Arc<AtomicBool>);

impl Attempt {
    pub fn seen(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A client's byte stream: first what came after its PROXY header, then the socket. On a
/// connection from outside `proxy_from` it watches the first bytes for a header: one there
/// reads as the end of the stream (the session ends, unaware), and its [`Attempt`] is set.
/// A header split right after its first line end (`\r\n`) goes by unseen; its address is
/// never taken all the same, as only `read_header` reads one.
pub struct PeerStream<S> {
    inner: S,
    /// Bytes to give before the socket's: what followed a header, or first bytes being looked at.
    head: Vec<u8>,
    at: usize,
    watch: Watch,
}

enum Watch {
    Off,
    On(Attempt),
    Refused,
}

impl<S> PeerStream<S> {
    /// The stream after a balancer's header: `rest` first.
    pub fn after_header(inner: S, rest: Vec<u8>) -> PeerStream<S> {
        PeerStream {
            inner,
            head: rest,
            at: 0,
            watch: Watch::Off,
        }
    }

    /// A direct client's stream, watched for a header it may not send.
    pub fn watched(inner: S) -> (PeerStream<S>, Attempt) {
        let attempt = Attempt::default();
        let stream = PeerStream {
            inner,
            head: Vec::new(),
            at: 0,
            watch: Watch::On(attempt.clone()),
        };
        (stream, attempt)
    }
}

impl<S: AsyncRead + Unpin> PeerStream<S> {
    /// Decides on what came so far: the watch ends, or the stream is refused, or it goes on.
    fn judge(&mut self) {
        match looks(&self.head) {
            Looks::Maybe => {}
            Looks::NotHeader => self.watch = Watch::Off,
            Looks::Header => self.refuse(),
        }
    }

    fn refuse(&mut self) {
        if let Watch::On(attempt) = &self.watch {
            attempt.0.store(true, Ordering::Relaxed);
        }
        self.watch = Watch::Refused;
        self.head = Vec::new();
    }

    /// While watching: the first bytes, left in the caller's buffer when they decide at once
    /// (the usual case: a whole command), else held in `head` until they do. Ready once the
    /// watch is over; the caller's buffer may then hold the bytes that ended it.
    fn poll_watch(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        while matches!(self.watch, Watch::On(_)) {
            if !self.head.is_empty() {
                let mut more = [0u8; 16];
                let mut more = ReadBuf::new(&mut more);
                ready!(Pin::new(&mut self.inner).poll_read(cx, &mut more))?;
                match more.filled() {
                    [] => self.watch = Watch::Off,
                    got => {
                        self.head.extend_from_slice(got);
                        self.judge();
                    }
                }
                continue;
            }
            let start = buf.filled().len();
            ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
            let got = &buf.filled()[start..];
            match looks(got) {
                _ if got.is_empty() => self.watch = Watch::Off,
                Looks::NotHeader => self.watch = Watch::Off,
                Looks::Header => {
                    buf.set_filled(start);
                    self.refuse();
                }
                Looks::Maybe => {
                    self.head = got.to_vec();
                    buf.set_filled(start);
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PeerStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.watch, Watch::On(_)) {
            let before = buf.filled().len();
            ready!(this.poll_watch(cx, buf))?;
            // What ended the watch is in `buf` (or it was the end of the stream).
            if buf.filled().len() > before || this.head.is_empty() {
                return Poll::Ready(Ok(()));
            }
        }
        if matches!(this.watch, Watch::Refused) {
            return Poll::Ready(Ok(()));
        }
        if this.at < this.head.len() {
            let n = buf.remaining().min(this.head.len() - this.at);
            buf.put_slice(&this.head[this.at..this.at + n]);
            this.at += n;
            if this.at == this.head.len() {
                (this.head, this.at) = (Vec::new(), 0);
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PeerStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
