//! The least an async Rust SMTP relay does for a message, as a baseline for the relay's CPU
//! per message (`bench/relay_cpu.sh`): the same system calls as mailsluice on the same tokio
//! runtime, and nothing else. It answers EHLO, MAIL, RCPT and DATA, reads the message to its
//! final dot, and forwards it over a pooled upstream connection with PIPELINING (the envelope
//! in one write, the `Received:` field, the message and its dot in another), then passes
//! upstream's reply on. Each read is bounded by a timeout, as any relay's must be.
//!
//! What it leaves out is what the comparison is about: no policy, throttle or tenant, no
//! checks of addresses, message or replies beyond their codes, no retry, no metrics or logs,
//! no TLS, no shutdown. Not for use as a relay.
//!
//! Usage: floor --config <mailsluice config>; it reads the file's `listen = ["host:port"]`
//! and `url = "smtp://host:port"`.

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const IDLE: Duration = Duration::from_secs(300);
const STEP: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1))
        .expect("usage: floor --config <file>");
    let config = std::fs::read_to_string(path)?;
    let listen = quoted_after(&config, "listen = [");
    let upstream = quoted_after(&config, "url = ").trim_start_matches("smtp://").to_string();
    let listener = TcpListener::bind(listen).await?;
    let pool = Arc::new(Pool {
        upstream,
        idle: Mutex::new(Vec::new()),
    });
    loop {
        let (tcp, peer) = listener.accept().await?;
        let pool = pool.clone();
        tokio::spawn(async move {
            let _ = session(Conn::new(tcp), peer, &pool).await;
        });
    }
}

/// The first double-quoted text after `key` in the config.
fn quoted_after<'a>(config: &'a str, key: &str) -> &'a str {
    let rest = &config[config.find(key).expect("key in config") + key.len()..];
    rest.split('"').nth(1).expect("a quoted value")
}

/// A connection with its input buffer: commands, replies and messages are read from it.
struct Conn {
    tcp: TcpStream,
    input: Vec<u8>,
    start: usize,
}

impl Conn {
    fn new(tcp: TcpStream) -> Conn {
        let _ = tcp.set_nodelay(true);
        Conn {
            tcp,
            input: Vec::with_capacity(4096),
            start: 0,
        }
    }

    async fn fill(&mut self, timeout: Duration) -> io::Result<()> {
        if self.start == self.input.len() {
            self.input.clear();
            self.start = 0;
        }
        self.input.reserve(4096);
        match tokio::time::timeout(timeout, self.tcp.read_buf(&mut self.input)).await {
            Ok(Ok(0)) => Err(ErrorKind::UnexpectedEof.into()),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ErrorKind::TimedOut.into()),
        }
    }

    /// The next line, with its CRLF.
    async fn line(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        loop {
            if let Some(at) = find(&self.input[self.start..], b"\r\n") {
                let end = self.start + at + 2;
                let line = self.input[self.start..end].to_vec();
                self.start = end;
                return Ok(line);
            }
            self.fill(timeout).await?;
        }
    }

    /// The message after DATA, up to and with its final dot, as the client sent it (so
    /// already dot-stuffed).
    async fn message(&mut self) -> io::Result<Vec<u8>> {
        loop {
            let pending = &self.input[self.start..];
            let end = match pending.starts_with(b".\r\n") {
                true => Some(3),
                false => find(pending, b"\r\n.\r\n").map(|at| at + 5),
            };
            if let Some(end) = end {
                let message = pending[..end].to_vec();
                self.start += end;
                return Ok(message);
            }
            self.fill(IDLE).await?;
        }
    }

    /// One reply's last line (a multi-line reply's others are skipped).
    async fn reply(&mut self) -> io::Result<Vec<u8>> {
        loop {
            let line = self.line(STEP).await?;
            if line.len() < 4 || line[3] != b'-' {
                return Ok(line);
            }
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.tcp.write_all(bytes).await
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Upstream connections, greeted and EHLO'd, reused one message after another.
struct Pool {
    upstream: String,
    idle: Mutex<Vec<Conn>>,
}

impl Pool {
    async fn checkout(&self) -> io::Result<Conn> {
        if let Some(conn) = self.idle.lock().unwrap().pop() {
            return Ok(conn);
        }
        let mut conn = Conn::new(TcpStream::connect(&self.upstream).await?);
        expect(&conn.reply().await?, b"220")?;
        conn.write(b"EHLO floor.test\r\n").await?;
        expect(&conn.reply().await?, b"250")?;
        Ok(conn)
    }

    fn checkin(&self, conn: Conn) {
        self.idle.lock().unwrap().push(conn);
    }
}

fn expect(reply: &[u8], code: &[u8]) -> io::Result<()> {
    match reply.starts_with(code) {
        true => Ok(()),
        false => Err(io::Error::other(String::from_utf8_lossy(reply).into_owned())),
    }
}

async fn session(mut client: Conn, peer: SocketAddr, pool: &Pool) -> io::Result<()> {
    client.write(b"220 floor.test ESMTP\r\n").await?;
    let mut envelope: Vec<u8> = Vec::new();
    let mut messages = 0u64;
    loop {
        let line = client.line(IDLE).await?;
        let verb = line.get(..4).unwrap_or(b"").to_ascii_uppercase();
        match &verb[..] {
            b"EHLO" => client.write(b"250-floor.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n").await?,
            b"HELO" | b"NOOP" => client.write(b"250 2.0.0 Ok\r\n").await?,
            b"RSET" => {
                envelope.clear();
                client.write(b"250 2.0.0 Ok\r\n").await?
            }
            b"MAIL" | b"RCPT" => {
                envelope.extend_from_slice(&line);
                client.write(b"250 2.1.0 Ok\r\n").await?
            }
            b"DATA" => {
                client.write(b"354 End data with <CR><LF>.<CR><LF>\r\n").await?;
                let message = client.message().await?;
                messages += 1;
                let received = received(peer, messages);
                let reply = match forward(pool, &envelope, &received, &message).await {
                    Ok(mut reply) => {
                        reply.truncate(reply.len().min(512));
                        reply
                    }
                    Err(_) => b"451 4.4.1 Upstream unavailable\r\n".to_vec(),
                };
                envelope.clear();
                client.write(&reply).await?
            }
            b"QUIT" => {
                client.write(b"221 2.0.0 Bye\r\n").await?;
                return Ok(());
            }
            _ => client.write(b"502 5.5.2 Command not recognized\r\n").await?,
        }
    }
}

fn received(peer: SocketAddr, n: u64) -> Vec<u8> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    format!(
        "Received: from client ([{}])\r\n\tby floor.test with ESMTP id {n:x}{secs:x};\r\n\t{secs}\r\n",
        peer.ip()
    )
    .into_bytes()
}

/// The envelope and DATA in one write, their replies, then the fields, the message and its
/// dot in one write, and upstream's reply to it.
async fn forward(
    pool: &Pool,
    envelope: &[u8],
    received: &[u8],
    message: &[u8],
) -> io::Result<Vec<u8>> {
    let mut up = pool.checkout().await?;
    let mut commands = Vec::with_capacity(envelope.len() + 6);
    commands.extend_from_slice(envelope);
    commands.extend_from_slice(b"DATA\r\n");
    up.write(&commands).await?;
    let rcpts = envelope.windows(4).filter(|w| w.eq_ignore_ascii_case(b"RCPT")).count();
    for _ in 0..1 + rcpts {
        expect(&up.reply().await?, b"250")?;
    }
    expect(&up.reply().await?, b"354")?;
    let mut body = Vec::with_capacity(received.len() + message.len());
    body.extend_from_slice(received);
    body.extend_from_slice(message);
    up.write(&body).await?;
    let reply = up.reply().await?;
    pool.checkin(up);
    Ok(reply)
}
