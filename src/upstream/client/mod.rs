//! One SMTP connection to upstream, ours from the socket up: what we write goes as written,
//! and upstream's replies are parsed in place from a buffer the connection keeps, so a
//! message costs no per-line allocation or copy. Opening it (greeting, EHLO, STARTTLS, AUTH)
//! is the pool's connector's; a message's commands are the transaction's.
//!
//! - `reply`: a reply read from the bytes, and what is no reply.
//! - `extensions`: what upstream's EHLO offers.
//! - `tls`: rustls towards upstream, verified or not.
//! - `auth`: AUTH PLAIN and LOGIN, and XOAUTH2 with a bearer token.
//! - `stream`: the socket under it (plain and corked, STARTTLS, implicit TLS).
//! - `corked`: the plain socket, a small message and its final dot in one write.

use std::io;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

mod auth;
mod corked;
mod extensions;
mod reply;
mod stream;
mod tls;

pub(in crate::upstream) use auth::Credentials;
pub(in crate::upstream) use corked::{Unsent, HOLD};
pub(in crate::upstream) use extensions::Extensions;
pub use reply::split_enhanced;
pub(in crate::upstream) use reply::{Malformed, Reply};
pub use tls::ClientTlsError;
pub(in crate::upstream) use tls::Tls;

use corked::Corked;
use stream::Stream;

/// How an exchange with upstream failed.
#[derive(Debug, thiserror::Error)]
pub(in crate::upstream) enum ClientError {
    /// A negative reply (4xx, 5xx): upstream answered, and said no.
    #[error("{} {}", .0.code, .0.joined())]
    Refused(Reply),
    #[error("connection closed by upstream")]
    Closed,
    #[error("network error: {0}")]
    Io(#[source] io::Error),
    #[error("malformed reply: {0}")]
    Malformed(#[from] Malformed),
    #[error("TLS handshake failed: {0}")]
    Tls(#[source] io::Error),
    /// A write, or the wait for a reply, took longer than the connection's timeout.
    #[error("no answer in time")]
    TimedOut,
    /// Upstream sent what answers no command of ours: a reply of the wrong kind (a `354` to
    /// the final dot, a `250` to DATA), or bytes before we asked (an extra line, an early
    /// one). The replies that follow cannot be matched to our commands any more.
    #[error("out of step: {0}")]
    OutOfStep(String),
}

impl ClientError {
    /// Upstream's reply code, when it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ClientError::Refused(reply) => Some(reply.code),
            _ => None,
        }
    }
}

/// An open connection, greeted.
pub(in crate::upstream) struct Client {
    stream: Stream,
    /// Read and not yet parsed: `buf[pos..]`.
    buf: Vec<u8>,
    pos: usize,
    extensions: Extensions,
    /// An exchange failed without a reply, or upstream sent what answers nothing: the
    /// connection is out of step.
    broken: bool,
    /// Bounds each exchange: a write, or the wait for one reply.
    timeout: Duration,
    /// One timer for every exchange, moved to each one's deadline: moving a registered timer
    /// later is a store, where a new one per exchange is entered into the timer wheel and
    /// taken out again.
    timer: Pin<Box<Sleep>>,
}

/// Read this much at a time; replies are short, and a pipelined group's fit in one read.
const READ: usize = 4096;

impl Client {
    /// Plain SMTP on `tcp` (STARTTLS may follow), its writes corked; the greeting read. Each
    /// exchange is bounded by `timeout`.
    pub async fn plain(tcp: TcpStream, timeout: Duration) -> Result<Client, ClientError> {
        Client::greeted(Stream::Plain(Corked::new(tcp)), timeout).await
    }

    /// SMTP inside TLS from the first byte (`smtps://`, RFC 8314); the greeting read.
    pub async fn implicit_tls(
        tcp: TcpStream,
        tls: &Tls,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        let tls_stream =
            (tls.connector().connect(tls.name(), tcp).await).map_err(ClientError::Tls)?;
        Client::greeted(Stream::Implicit(Box::new(tls_stream)), timeout).await
    }

    async fn greeted(stream: Stream, timeout: Duration) -> Result<Client, ClientError> {
        let mut client = Client {
            stream,
            buf: Vec::with_capacity(READ),
            pos: 0,
            extensions: Extensions::default(),
            broken: false,
            timeout,
            timer: Box::pin(tokio::time::sleep(timeout)),
        };
        client.read_reply().await?;
        Ok(client)
    }

    /// EHLO, and what it offers (each EHLO's answer replaces the last's, as RFC 3207 asks
    /// after STARTTLS).
    pub async fn ehlo(&mut self, name: &str) -> Result<(), ClientError> {
        let reply = self.command(format!("EHLO {name}\r\n").as_bytes()).await?;
        self.extensions = Extensions::of(&reply);
        Ok(())
    }

    /// STARTTLS, the handshake, and EHLO again inside. A failed handshake leaves nothing
    /// usable: the connection is broken.
    pub async fn starttls(&mut self, tls: &Tls, name: &str) -> Result<(), ClientError> {
        self.command(b"STARTTLS\r\n").await?;
        let Stream::Plain(corked) = std::mem::replace(&mut self.stream, Stream::Gone) else {
            self.broken = true;
            return Err(ClientError::Tls(io::Error::other(
                "STARTTLS on a TLS connection",
            )));
        };
        // Bytes after the 220 were sent in clear before the handshake: refuse them rather
        // than read them as the encrypted session's (the STARTTLS injection of CVE-2011-0411).
        if self.pos < self.buf.len() {
            self.broken = true;
            return Err(ClientError::Tls(io::Error::other(
                "data after the 220 to STARTTLS",
            )));
        }
        match tls.connector().connect(tls.name(), corked).await {
            Ok(tls_stream) => self.stream = Stream::StartTls(Box::new(tls_stream)),
            Err(e) => {
                self.broken = true;
                return Err(ClientError::Tls(e));
            }
        }
        self.ehlo(name).await
    }

    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// Whether small writes are joined before they go (the plain connection's cork), so
    /// that writing a message in many slices costs no more than writing it as one text.
    pub fn joins_writes(&self) -> bool {
        matches!(self.stream, Stream::Plain(_))
    }

    /// Whether the connection fell out of step (a failed write or read, a malformed reply):
    /// never to be used again.
    #[cfg(test)]
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Writes `text` (one or more whole command lines) and reads one reply.
    pub async fn command(&mut self, text: &[u8]) -> Result<Reply, ClientError> {
        self.send(text).await?;
        self.read_reply().await
    }

    /// [`Client::command`] whose positive reply's text is not wanted, and must be of `class`
    /// (2: done; 3: go on, as DATA's 354).
    pub async fn command_ok(&mut self, text: &[u8], class: u16) -> Result<(), ClientError> {
        self.send(text).await?;
        self.read_ok(class).await
    }

    /// Writes `bytes` as they are, and flushes (through the cork, see `corked`).
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.send_all(&[bytes]).await
    }

    /// Writes every slice in turn, then flushes. Every reply to what we sent before must have
    /// been read: upstream's bytes not yet read (an extra line, one sent early) would be taken
    /// as the reply to this, so the connection is given up instead.
    pub async fn send_all(&mut self, slices: &[&[u8]]) -> Result<(), ClientError> {
        if self.pos < self.buf.len() {
            let unasked = ClientError::OutOfStep(format!("{}", Unasked(&self.buf[self.pos..])));
            return Err(self.fail(unasked));
        }
        self.timer.as_mut().reset(Instant::now() + self.timeout);
        let Client { stream, timer, .. } = self;
        let written = async {
            for slice in slices {
                stream.write_all(slice).await?;
            }
            stream.flush().await
        };
        let result = tokio::select! {
            biased;
            written = written => written.map_err(ClientError::Io),
            _ = timer.as_mut() => Err(ClientError::TimedOut),
        };
        result.map_err(|e| self.fail(e))
    }

    /// The next reply: `Ok` for 2xx and 3xx, [`ClientError::Refused`] for 4xx and 5xx.
    pub async fn read_reply(&mut self) -> Result<Reply, ClientError> {
        self.timer.as_mut().reset(Instant::now() + self.timeout);
        loop {
            match reply::parse(&self.buf[self.pos..]) {
                Ok(Some((reply, used))) => {
                    self.consume(used);
                    return match reply.is_positive() {
                        true => Ok(reply),
                        false => Err(ClientError::Refused(reply)),
                    };
                }
                Ok(None) => self.fill().await?,
                Err(malformed) => return Err(self.fail(malformed.into())),
            }
        }
    }

    /// [`Client::read_reply`] for a reply whose text is not wanted when it is positive (a
    /// pipelined command's), which must be of `class`: one of another class answers some
    /// other command, and ends the connection. A refusal still comes whole.
    pub async fn read_ok(&mut self, class: u16) -> Result<(), ClientError> {
        self.timer.as_mut().reset(Instant::now() + self.timeout);
        loop {
            match reply::code_of(&self.buf[self.pos..]) {
                Ok(Some((code, used))) if code < 400 && code / 100 == class => {
                    self.consume(used);
                    return Ok(());
                }
                Ok(Some((code, _))) if code < 400 => {
                    let wrong = format!("{code} where a {class}xx reply was due");
                    return Err(self.fail(ClientError::OutOfStep(wrong)));
                }
                Ok(Some(_)) => return self.read_reply().await.map(drop),
                Ok(None) => self.fill().await?,
                Err(malformed) => return Err(self.fail(malformed.into())),
            }
        }
    }

    fn consume(&mut self, used: usize) {
        self.pos += used;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.buf.shrink_to(READ);
            self.pos = 0;
        }
    }

    /// Reads more of upstream's bytes, before the timer set for this exchange fires.
    async fn fill(&mut self) -> Result<(), ClientError> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        // Exact: the buffer then never holds more than the bound and one read.
        self.buf.reserve_exact(READ);
        let read = tokio::select! {
            biased;
            read = self.stream.read_buf(&mut self.buf) => read,
            _ = self.timer.as_mut() => return Err(self.fail(ClientError::TimedOut)),
        };
        match read {
            Ok(0) => Err(self.fail(ClientError::Closed)),
            Ok(_) => Ok(()),
            Err(e) => Err(self.fail(ClientError::Io(e))),
        }
    }

    /// [`Client::read_reply`] for the reply that ends an exchange, which must be a `2xx` when
    /// positive (the final dot's: a `354` there answers some other command).
    pub async fn read_final(&mut self) -> Result<Reply, ClientError> {
        let reply = self.read_reply().await?;
        if reply.code / 100 != 2 {
            let wrong = format!("{} where a 2xx reply was due", reply.code);
            return Err(self.fail(ClientError::OutOfStep(wrong)));
        }
        Ok(reply)
    }

    /// Whether the connection is between exchanges with nothing of upstream's unread: none
    /// in the buffer, none waiting in the socket, and not closed by upstream. Asked before a
    /// connection is parked or reused, so an extra line never becomes the next message's
    /// reply; one that is not gets broken. Costs at most one read that finds nothing.
    pub fn is_idle_in_step(&mut self) -> bool {
        use futures_util::FutureExt;
        if self.broken {
            return false;
        }
        if self.pos < self.buf.len() {
            self.broken = true;
            return false;
        }
        self.buf.reserve_exact(READ);
        let quiet = self.stream.read_buf(&mut self.buf).now_or_never().is_none();
        if !quiet {
            // Bytes, a close or an error: nothing a parked connection should hear.
            self.broken = true;
        }
        quiet
    }

    /// QUIT, and its reply (whatever it is: the connection is done either way).
    pub async fn quit(&mut self) {
        let _ = self.command(b"QUIT\r\n").await;
        let _ = self.stream.shutdown().await;
    }

    fn fail(&mut self, e: ClientError) -> ClientError {
        self.broken = true;
        e
    }
}

/// A few of upstream's unasked-for bytes, for the log.
struct Unasked<'a>(&'a [u8]);

impl std::fmt::Display for Unasked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = &self.0[..self.0.len().min(64)];
        write!(
            f,
            "upstream sent {:?} unasked",
            String::from_utf8_lossy(shown)
        )
    }
}

#[cfg(test)]
mod tests;
