//! One client's SMTP session: its state and the command loop. Each verb's rules live in the
//! file named after it; this file only reads, parses and dispatches, and decides when the
//! session ends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use smtp_proto::{Error as ParseError, Request};

use super::client::Client;
use super::conn::{Conn, Line, Stop};
use super::counters::Counters;
use super::place::Place;
use super::transaction::Transaction;
use crate::reply::{self, Reply};
use crate::state::context::Context;
use crate::state::shutdown::Shutdown;

/// Whether the session goes on after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Close,
}

/// One client's session, its state grouped by what it is about: who the client is
/// (`client.rs`), the open transaction (`transaction.rs`), its counts against its bounds
/// (`counters.rs`), its place in the running relay (`place.rs`), and its connection.
pub struct Session {
    /// The running relay's config and services: a transaction, and AUTH, move it to the
    /// newest config (SIGHUP).
    pub(super) ctx: Arc<Context>,
    pub(super) conn: Conn,
    pub(super) client: Client,
    pub(super) transaction: Option<Transaction>,
    pub(super) counters: Counters,
    pub(super) place: Place,
}

/// How long after a message's answer, when the relay is shutting down, a session waits for
/// the client's next command: a client that got its `250` sends `QUIT` at once, and a `421`
/// to it would read as a failure (swaks reports an error), though its message went. Anything
/// else, or nothing by then, gets the `421`. Short: a pooled client that stays idle after its
/// message holds the drain that long at most.
pub const AFTER_MESSAGE: Duration = Duration::from_secs(2);

/// How long, at shutdown, a session waits after its last reply for the client to close (see
/// [`Conn::linger`]); the server waits for its sessions about as long after the grace.
const LINGER: Duration = Duration::from_secs(1);

impl Session {
    pub fn new(
        ctx: Arc<Context>,
        conn: Conn,
        peer: SocketAddr,
        shutdown: Shutdown,
        tls: bool,
    ) -> Session {
        let client = Client::new(peer, tls, &ctx.setup.config.smtp.trusted_networks);
        let place = Place::new(&ctx, shutdown);
        Session {
            ctx,
            conn,
            client,
            transaction: None,
            counters: Counters::default(),
            place,
        }
    }

    /// Runs the session to its end; the connection is closed when this returns.
    pub async fn run(&mut self) {
        let greeting = reply::greeting(&self.ctx.setup.config.smtp.hostname);
        self.conn.reply(&greeting);
        loop {
            let line = match self.conn.read_line(self.place.shutdown()).await {
                Ok(line) => line,
                Err(stop) => return self.stop(stop).await,
            };
            let flow = match line {
                Line::TooLong => {
                    let max = self.ctx.setup.config.smtp.max_line_bytes.get();
                    self.conn.reply(&reply::line_too_long(max));
                    Flow::Continue
                }
                Line::Command(bytes) => {
                    self.place.command_read();
                    let flow = self.command(&bytes).await;
                    self.conn.recycle(bytes);
                    flow
                }
            };
            if flow == Flow::Close {
                self.conn.shutdown_write().await;
                return;
            }
            let errors = self.counters.errors();
            if errors >= self.ctx.setup.config.smtp.max_errors.get() {
                tracing::info!(peer = %self.client.peer(), errors, "too many errors");
                self.conn.reply(&reply::too_many_errors());
                self.conn.shutdown_write().await;
                return;
            }
            if self.conn.output_full() {
                self.conn.flush().await;
            }
        }
    }

    async fn stop(&mut self, stop: Stop) {
        let last = match stop {
            Stop::Closed => return,
            Stop::Idle => reply::idle_timeout(),
            Stop::Shutdown if self.quits().await => reply::bye(),
            Stop::Shutdown => reply::shutting_down(),
            Stop::DataTimeout => reply::data_timeout(),
        };
        self.conn.reply(&last);
        self.conn.shutdown_write().await;
        if stop == Stop::Shutdown {
            self.conn.linger(LINGER).await;
        }
    }

    /// Whether the client's next command, within [`AFTER_MESSAGE`] of its message's answer
    /// (and the grace), is QUIT.
    async fn quits(&mut self) -> bool {
        let Some(answered) = self.place.last_message_answered() else {
            return false;
        };
        let deadline = answered + AFTER_MESSAGE;
        let line = match self.place.grace_over() {
            Some(bell) => tokio::select! {
                line = self.conn.line_by(deadline) => line,
                _ = bell.wait() => None,
            },
            None => self.conn.line_by(deadline).await,
        };
        matches!(line, Some(Line::Command(l)) if l.eq_ignore_ascii_case(b"QUIT\r\n"))
    }

    async fn command(&mut self, line: &[u8]) -> Flow {
        if is_bdat(line) {
            return self.bdat();
        }
        if let Some(problem) = malformed(line) {
            self.reply(problem);
            return Flow::Continue;
        }
        // MAIL and RCPT are read by `path`: smtp-proto's parser changes addresses.
        if self.envelope_command(line).await {
            return Flow::Continue;
        }
        let request = match Request::parse(&mut line.iter()) {
            Ok(request) => request,
            Err(e) => {
                self.reply(parse_error_reply(&e));
                return Flow::Continue;
            }
        };
        if is_junk(&request) && self.junk_past_bound() {
            return Flow::Close;
        }
        match request {
            Request::Ehlo { host } => self.ehlo(&host, true),
            Request::Helo { host } => self.ehlo(&host, false),
            Request::Data => return self.data().await,
            Request::Rset => self.rset(),
            Request::Noop { .. } => self.conn.reply(&reply::ok()),
            Request::Vrfy { .. } => self.vrfy(),
            Request::Help { .. } => self.help(),
            Request::StartTls => return self.starttls().await,
            Request::Auth {
                mechanism,
                initial_response,
            } => return self.auth(mechanism, &initial_response).await,
            Request::Quit => {
                self.conn.reply(&reply::bye());
                return Flow::Close;
            }
            other => self.reply(reply::not_implemented(other.name())),
        }
        Flow::Continue
    }

    /// BDAT (CHUNKING is not offered): its chunk follows at once, and reading those bytes as
    /// commands would run whatever the client put in the chunk. The relay does not read it:
    /// `502`, then `421` and close. Postfix without CHUNKING also refuses BDAT and
    /// disconnects, with a `521`.
    fn bdat(&mut self) -> Flow {
        tracing::info!(peer = %self.client.peer(), "BDAT without CHUNKING: closing");
        self.reply(reply::not_implemented("BDAT"));
        self.conn.reply(&reply::bdat_closing());
        Flow::Close
    }

    /// Counts a junk command; true (answered `421`) when it is one past `max_junk_commands`.
    fn junk_past_bound(&mut self) -> bool {
        let junk = self.counters.count_junk();
        if junk <= self.ctx.setup.config.smtp.max_junk_commands.get() {
            return false;
        }
        tracing::info!(peer = %self.client.peer(), junk, "too many junk commands");
        self.conn.reply(&reply::too_many_junk_commands());
        true
    }

    /// Queues a reply; it goes out when the session next waits for the client. A 5xx counts
    /// as an error against `max_errors`.
    pub fn reply(&mut self, reply: Reply) {
        if reply.code >= 500 {
            self.counters.count_error();
        }
        self.conn.reply(&reply);
    }

    /// Queues the verdict on a message at its final dot. Not counted as an error: a client
    /// whose messages upstream refuses is not misbehaving.
    pub fn verdict(&mut self, reply: Reply) {
        self.conn.reply(&reply);
    }
}

/// What is wrong with a command line's bytes before parsing, if anything: a NUL, a bare CR
/// or LF (only the final CRLF may end it), or bytes that are not UTF-8 (RFC 6531 allows
/// UTF-8 in addresses, nothing else).
fn malformed(line: &[u8]) -> Option<Reply> {
    let Some(body) = line.strip_suffix(b"\r\n") else {
        return Some(reply::bare_newline_in_command());
    };
    if let Some(at) = memchr::memchr3(0, b'\r', b'\n', body) {
        // A NUL anywhere is named first, as it always was.
        if memchr::memchr(0, &body[at..]).is_some() {
            return Some(reply::syntax_error("NUL byte in command"));
        }
        return Some(reply::bare_newline_in_command());
    }
    if std::str::from_utf8(body).is_err() {
        return Some(reply::invalid_utf8());
    }
    None
}

/// Whether the line is a BDAT command, well-formed or not.
fn is_bdat(line: &[u8]) -> bool {
    line.len() >= 4
        && line[..4].eq_ignore_ascii_case(b"BDAT")
        && line
            .get(4)
            .is_none_or(|b| matches!(b, b' ' | b'\r' | b'\n' | b'\t'))
}

/// Commands that move no message on: a session sending only these is held open for nothing
/// (Postfix counts NOOP, VRFY, ETRN and RSET; HELP and a repeated EHLO are as free).
fn is_junk<T>(request: &Request<T>) -> bool {
    matches!(
        request,
        Request::Noop { .. }
            | Request::Rset
            | Request::Vrfy { .. }
            | Request::Help { .. }
            | Request::Ehlo { .. }
            | Request::Helo { .. }
    )
}

fn parse_error_reply(e: &ParseError) -> Reply {
    match e {
        ParseError::UnknownCommand => reply::unknown_command(),
        ParseError::InvalidSenderAddress => reply::bad_sender_syntax(),
        ParseError::InvalidRecipientAddress => reply::bad_recipient_syntax(),
        ParseError::SyntaxError { syntax } => reply::syntax_error(&format!("expected {syntax}")),
        ParseError::InvalidParameter { param } => reply::invalid_parameter(param),
        ParseError::UnsupportedParameter { param } => reply::unsupported_parameter(param),
        _ => reply::syntax_error("malformed command"),
    }
}
