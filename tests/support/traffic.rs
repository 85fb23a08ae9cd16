//! A tolerant SMTP client for traffic under faults: it never panics on what the relay or the
//! network does, it records what it saw as a [`Seen`]. Each message goes on its own
//! connection, with its id in the [`ID_HEADER`](super::invariant::ID_HEADER) header.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::invariant::{message, ClientLog, Seen};

/// How long the client waits for any one reply before it gives up (and counts the attempt as
/// no reply). Long: the relay's own bounds are what is under test.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// When the client goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leave {
    /// Never: it reads the final reply.
    Never,
    /// In the middle of the message: half the body sent, then the connection is closed.
    DuringData,
    /// Right after the final dot, before reading the reply.
    AfterDot,
}

/// A connection whose message was sent up to and including its final dot, reply not read.
pub struct Sent {
    io: BufReader<TcpStream>,
}

impl Sent {
    /// Reads the final reply.
    pub async fn reply(mut self) -> Seen {
        match read_reply(&mut self.io).await {
            Some((code, text)) => {
                let _ = self.io.get_mut().write_all(b"QUIT\r\n").await;
                Seen::Reply(code, text)
            }
            None => Seen::NoReply,
        }
    }

    /// Closes the connection without reading the reply (the client goes away).
    pub fn leave(self) -> Seen {
        drop(self);
        Seen::NoReply
    }
}

/// A connection greeted and past EHLO, between transactions.
pub struct Session {
    io: BufReader<TcpStream>,
}

impl Session {
    /// Connects, reads the greeting and says EHLO; `Err` when any of it fails.
    pub async fn open(addr: SocketAddr) -> Result<Session, Seen> {
        let Ok(stream) = TcpStream::connect(addr).await else {
            return Err(Seen::Unsent);
        };
        let _ = stream.set_nodelay(true);
        let mut io = BufReader::new(stream);
        expect(&mut io, None, 220).await?;
        expect(&mut io, Some("EHLO client.test"), 250).await?;
        Ok(Session { io })
    }

    /// Sends one message up to its final dot. `Err` is what the client saw when it never
    /// got that far (a refusal before the dot, a broken connection, or `Leave::DuringData`).
    pub async fn send_to_dot(
        mut self,
        id: &str,
        tenant: &str,
        rcpts: &[String],
        leave: Leave,
    ) -> Result<Sent, Seen> {
        let io = &mut self.io;
        expect(io, Some("MAIL FROM:<app@example.com>"), 250).await?;
        for rcpt in rcpts {
            expect(io, Some(&format!("RCPT TO:<{rcpt}>")), 250).await?;
        }
        expect(io, Some("DATA"), 354).await?;
        let body = message(id, tenant);
        if leave == Leave::DuringData {
            let _ = io.get_mut().write_all(&body[..body.len() / 2]).await;
            return Err(Seen::Unsent);
        }
        let mut data = body;
        data.extend_from_slice(b".\r\n");
        // A failed write may still have sent the dot: it counts as sent, the weaker claim, and
        // reading the reply then finds the broken connection.
        let _ = io.get_mut().write_all(&data).await;
        Ok(Sent { io: self.io })
    }
}

/// Connects and sends one message up to its final dot (see [`Session::send_to_dot`]).
pub async fn send_to_dot(
    addr: SocketAddr,
    id: &str,
    tenant: &str,
    rcpts: &[String],
    leave: Leave,
) -> Result<Sent, Seen> {
    Session::open(addr)
        .await?
        .send_to_dot(id, tenant, rcpts, leave)
        .await
}

/// Sends one message on a new connection and records what the client saw in `log`.
pub async fn send(addr: SocketAddr, log: &ClientLog, id: &str, tenant: &str, leave: Leave) -> Seen {
    let seen = match send_to_dot(addr, id, tenant, &[rcpt()], leave).await {
        Err(seen) => seen,
        Ok(sent) if leave == Leave::AfterDot => sent.leave(),
        Ok(sent) => sent.reply().await,
    };
    log.record(id, seen.clone());
    seen
}

/// The recipient of every test message.
pub fn rcpt() -> String {
    "user@example.net".to_string()
}

/// Sends `line` (when given) and reads a reply, which must have code `want`; otherwise the
/// message is unsent.
async fn expect(io: &mut BufReader<TcpStream>, line: Option<&str>, want: u16) -> Result<(), Seen> {
    if let Some(line) = line {
        let command = format!("{line}\r\n");
        if io.get_mut().write_all(command.as_bytes()).await.is_err() {
            return Err(Seen::Unsent);
        }
    }
    match read_reply(io).await {
        Some((code, _)) if code == want => Ok(()),
        _ => Err(Seen::Unsent),
    }
}

/// One reply (its lines joined with `\n`), or `None` at EOF, on an error or after
/// [`REPLY_TIMEOUT`].
pub async fn read_reply(io: &mut BufReader<TcpStream>) -> Option<(u16, String)> {
    let read = async {
        let mut text = Vec::new();
        loop {
            let mut line = String::new();
            if io.read_line(&mut line).await.unwrap_or(0) == 0 || line.len() < 4 {
                return None;
            }
            let code: u16 = line[..3].parse().ok()?;
            text.push(line[4..].trim_end().to_string());
            if line.as_bytes()[3] == b' ' {
                return Some((code, text.join("\n")));
            }
        }
    };
    tokio::time::timeout(REPLY_TIMEOUT, read)
        .await
        .ok()
        .flatten()
}
