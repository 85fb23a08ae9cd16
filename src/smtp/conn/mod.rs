//! The client connection: an input buffer read in lines or DATA chunks, and an output buffer
//! flushed only when the session has to wait for input. Replies to pipelined commands are thus
//! written together, in order (RFC 2920), and nothing is written twice.
//!
//! Every wait is bounded: a command line must arrive within the idle timeout (a deadline per
//! command, not per byte, so a client trickling one byte at a time cannot hold a session), a
//! whole DATA section within `data_timeout_ms`, and a write within the idle timeout (a client
//! that pipelines commands but never reads its replies is dropped, not buffered for).

use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

use super::data_reader::DataReader;
use crate::reply::Reply;
use crate::state::shutdown::Shutdown;

/// Any byte stream a session can run on: plain TCP now, TLS after STARTTLS.
pub trait AsyncStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> AsyncStream for T {}

/// Why no line (or no DATA) could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The client closed the connection or it failed.
    Closed,
    /// The client stayed silent for longer than the idle timeout.
    Idle,
    /// The relay is shutting down.
    Shutdown,
    /// DATA went on for longer than `data_timeout_ms`.
    DataTimeout,
}

/// One command line, or a line over the length bound (already skipped up to its end).
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Command(Vec<u8>),
    TooLong,
}

/// How much a waiting client may send before the relay stops reading it: enough for any
/// pipelined tail (QUIT, RSET, a next MAIL), not enough to make a wait cost memory.
const WATCH_LIMIT: usize = 64 * 1024;

/// Pending replies past which the session writes them out before reading on, so a flood of
/// pipelined commands from a client that does not read costs at most this much memory.
const OUTPUT_LIMIT: usize = 64 * 1024;

/// The largest command line buffer kept for the next line (most commands are far shorter).
const SPARE_LIMIT: usize = 256;

/// Room made in the input buffer for one read of commands, or of what a waiting client
/// sends: every idle or waiting session holds this much, so it is small (commands are).
const COMMAND_READ: usize = 1024;

/// Room made for one read of DATA once the message is past this size: fewer, larger reads
/// for big messages. The buffer goes back to `COMMAND_READ` after the message, so a session
/// that then waits in a queue holds no more than an idle one.
const DATA_READ: usize = 16 * 1024;

/// Room made for one read of a message's first `DATA_READ` bytes: a small message (a few
/// KiB, most mail) in one read rather than one per KiB, each a system call.
const SMALL_DATA_READ: usize = 4 * 1024;

pub struct Conn {
    stream: Box<dyn AsyncStream>,
    input: Vec<u8>,
    /// Bytes of `input` already consumed.
    start: usize,
    output: Vec<u8>,
    idle: Duration,
    max_line: usize,
    /// Inside an over-long line: drop bytes until its CRLF.
    skipping: bool,
    /// A write failed or timed out: the connection is treated as closed.
    broken: bool,
    /// The last command line's buffer, given back by the session, for the next line.
    spare: Vec<u8>,
    /// The one timer bounding each read, moved to the read's deadline: a later deadline is
    /// one atomic store, where a timer per read would enter and leave the runtime's timer
    /// wheel (under its lock) for every command. `None` only while a read holds it.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    pub fn new(stream: Box<dyn AsyncStream>, idle: Duration, max_line: usize) -> Conn {
        Conn {
            stream,
            input: Vec::with_capacity(COMMAND_READ),
            start: 0,
            output: Vec::with_capacity(512),
            idle,
            max_line,
            skipping: false,
            broken: false,
            spare: Vec::new(),
            timer: None,
        }
    }

    /// Takes the stream out for a TLS handshake (STARTTLS), leaving a closed placeholder;
    /// `restore` puts the encrypted one back. Pending replies must have been flushed.
    pub fn take_stream(&mut self) -> Box<dyn AsyncStream> {
        debug_assert!(self.output.is_empty());
        std::mem::replace(&mut self.stream, Box::new(tokio::io::duplex(1).0))
    }

    pub fn restore(&mut self, stream: Box<dyn AsyncStream>) {
        self.stream = stream;
    }

    /// Drops every byte received but not yet read: after STARTTLS, plaintext the client
    /// pipelined behind the command must not be taken as if it came over TLS (RFC 3207 4.2,
    /// CVE-2011-0411).
    pub fn discard_input(&mut self) {
        self.input.clear();
        self.start = 0;
        self.skipping = false;
    }

    /// Whether pending replies have reached the bound where they must be written out.
    pub fn output_full(&self) -> bool {
        self.output.len() >= OUTPUT_LIMIT
    }

    pub fn reply(&mut self, reply: &Reply) {
        reply.write_to(&mut self.output);
    }

    /// Writes out pending replies. A failed write is not reported here: the next read sees
    /// the closed connection.
    pub async fn flush(&mut self) {
        if self.output.is_empty() || self.broken {
            self.output.clear();
            return;
        }
        let write = async {
            self.stream.write_all(&self.output).await?;
            self.stream.flush().await
        };
        let ok = matches!(tokio::time::timeout(self.idle, write).await, Ok(Ok(())));
        self.output.clear();
        self.broken = !ok;
    }

    /// The next command line, without its line ending. A line longer than `max_line` is
    /// reported once as `TooLong` and skipped to its end, so the session can go on.
    pub async fn read_line(&mut self, shutdown: &mut Shutdown) -> Result<Line, Stop> {
        let deadline = Instant::now() + self.idle;
        loop {
            if let Some(line) = self.take_line() {
                return Ok(line);
            }
            self.fill(shutdown, deadline).await?;
        }
    }

    /// The next command line if it comes by `deadline`, whatever the shutdown: for the one
    /// command a client sends right after its message's reply during the drain.
    pub async fn line_by(&mut self, deadline: Instant) -> Option<Line> {
        loop {
            if let Some(line) = self.take_line() {
                return Some(line);
            }
            self.flush().await;
            match self.read_until(deadline, COMMAND_READ).await {
                Some(Ok(())) => {}
                Some(Err(_)) | None => return None,
            }
        }
    }

    /// Takes back a command line's buffer once the command is done with, so the next line
    /// needs no allocation; a buffer grown by a long line is let go, so an idle session
    /// holds little.
    pub fn recycle(&mut self, line: Vec<u8>) {
        if line.capacity() <= SPARE_LIMIT {
            self.spare = line;
        }
    }

    /// Only CRLF ends a line: a bare LF is part of the line it is in (which the session
    /// then refuses whole), so the bytes after it can never run as a command of their own.
    fn take_line(&mut self) -> Option<Line> {
        loop {
            let pending = &self.input[self.start..];
            match find_crlf(pending) {
                // The tail of a line already reported as too long: drop it, look further.
                Some(pos) if self.skipping => {
                    self.start += pos + 2;
                    self.skipping = false;
                }
                Some(pos) => {
                    let end = self.start + pos + 2;
                    let mut line = std::mem::take(&mut self.spare);
                    line.clear();
                    line.extend_from_slice(&self.input[self.start..end]);
                    self.start = end;
                    if line.len() > self.max_line {
                        return Some(Line::TooLong);
                    }
                    return Some(Line::Command(line));
                }
                None if self.skipping || pending.len() > self.max_line => {
                    // A last CR stays: the LF after it may come with the next read.
                    let keep = usize::from(pending.last() == Some(&b'\r'));
                    self.start = self.input.len() - keep;
                    let first = !std::mem::replace(&mut self.skipping, true);
                    return first.then_some(Line::TooLong);
                }
                None => return None,
            }
        }
    }

    /// Reads DATA into `reader` until its terminator; bytes after it stay buffered.
    /// A message in flight is read to its end even during shutdown; the grace period bounds it.
    /// Each read waits at most the idle timeout, and the whole at most until `deadline`.
    pub async fn read_data(
        &mut self,
        reader: &mut DataReader,
        deadline: Instant,
    ) -> Result<(), Stop> {
        loop {
            let pending = &self.input[self.start..];
            match reader.feed(pending) {
                Some(used) => {
                    self.start += used;
                    self.shrink_input();
                    return Ok(());
                }
                None => self.start = self.input.len(),
            }
            self.flush().await;
            let idle = Instant::now() + self.idle;
            let (at, stop) = if idle < deadline {
                (idle, Stop::Idle)
            } else {
                (deadline, Stop::DataTimeout)
            };
            let room = match reader.len() < DATA_READ {
                true => SMALL_DATA_READ,
                false => DATA_READ,
            };
            match self.read_until(at, room).await {
                Some(r) => r?,
                None => return Err(stop),
            }
        }
    }

    /// Resolves when the client closes the connection (or fails), while the relay holds it
    /// waiting. Bytes it sends meanwhile are kept for later, up to `WATCH_LIMIT`; past that
    /// the relay stops reading, and thus stops noticing a close, rather than grow.
    pub async fn closed(&mut self) {
        self.flush().await;
        loop {
            if self.input.len() - self.start >= WATCH_LIMIT {
                return std::future::pending().await;
            }
            if self.read_some(COMMAND_READ).await.is_err() {
                return;
            }
        }
    }

    async fn fill(&mut self, shutdown: &mut Shutdown, deadline: Instant) -> Result<(), Stop> {
        self.flush().await;
        // Shutdown first: between commands, a client is told to come back later even if its
        // next command already arrived. Then the read: the signal is looked at again only
        // while the read waits (a session's every read, so the cheaper order).
        if shutdown.fired() {
            return Err(Stop::Shutdown);
        }
        tokio::select! {
            biased;
            r = self.read_until(deadline, COMMAND_READ) => r.unwrap_or(Err(Stop::Idle)),
            _ = shutdown.wait() => Err(Stop::Shutdown),
        }
    }

    /// One read (as `read_some`), or `None` if `deadline` comes first.
    async fn read_until(&mut self, deadline: Instant, room: usize) -> Option<Result<(), Stop>> {
        let mut timer = match self.timer.take() {
            Some(mut timer) => {
                timer.as_mut().reset(deadline);
                timer
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        };
        let read = tokio::select! {
            biased;
            r = self.read_some(room) => Some(r),
            _ = timer.as_mut() => None,
        };
        self.timer = Some(timer);
        read
    }

    /// After a message: the input buffer, grown for DATA, goes back to the size of a
    /// command read (keeping what the client pipelined behind the final dot).
    fn shrink_input(&mut self) {
        if self.input.capacity() <= 2 * COMMAND_READ {
            return;
        }
        self.input.drain(..self.start);
        self.start = 0;
        self.input.shrink_to(COMMAND_READ.max(self.input.len()));
    }

    /// Reads once into the buffer, making `room` for it (cancel-safe: a cancelled read has
    /// read nothing).
    async fn read_some(&mut self, room: usize) -> Result<(), Stop> {
        if self.broken {
            return Err(Stop::Closed);
        }
        if self.start > 0 && self.start * 2 >= self.input.len() {
            self.input.drain(..self.start);
            self.start = 0;
        }
        // Read straight into the buffer's spare room: a stack buffer would sit in every
        // session's future, and thousands of waiting sessions would pay for it.
        self.input.reserve(room);
        match self.stream.read_buf(&mut self.input).await {
            Ok(0) | Err(_) => Err(Stop::Closed),
            Ok(_) => Ok(()),
        }
    }

    /// Writes out pending replies and closes our side. Bounded like every write: a TLS
    /// close_notify to a client that reads nothing must not hold the session open.
    pub async fn shutdown_write(&mut self) {
        self.flush().await;
        if !self.broken {
            let _ = tokio::time::timeout(self.idle, self.stream.shutdown()).await;
        }
    }

    /// After our last reply and [`Conn::shutdown_write`]: waits up to `within` for the client
    /// to close, dropping what it still sends. A process that exits right after writing can
    /// lose the reply: a socket closed with unread input resets, and a pod's network may go
    /// before the kernel has sent it. The client's close says the reply arrived.
    pub async fn linger(&mut self, within: Duration) {
        if self.broken {
            return;
        }
        let mut scratch = [0u8; 256];
        let _ = tokio::time::timeout(within, async {
            while let Ok(1..) = self.stream.read(&mut scratch).await {}
        })
        .await;
    }
}

/// Where the first CRLF of `haystack` starts.
fn find_crlf(haystack: &[u8]) -> Option<usize> {
    haystack.windows(2).position(|w| w == b"\r\n")
}

#[cfg(test)]
mod tests;
