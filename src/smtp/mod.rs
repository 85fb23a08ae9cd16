//! The inbound ESMTP dialogue (the accept loop is `crate::serve::server`).
//!
//! - `session`: one client's state and command loop; it dispatches each command to the file
//!   named after its verb: `ehlo`, `mail`, `rcpt`, `data`, `rset`, `vrfy`, `help`,
//!   `starttls` (upgrades the connection), `auth` (checks passwords).
//! - `deliver`: the final dot: policy, throttle, trace, upstream, and one `verdict` (reply,
//!   outcome, log record) that the session answers and logs once; `waiter`: the wait for
//!   tokens (the client watched); `forward`: the upstream leg (throttle replies absorbed,
//!   quota pause, fallback).
//! - `reputation`: the tenant reputation guard's refusals (MAIL, RCPT, the final dot) and
//!   what it is told of each message upstream took or refused.
//! - `path`: the address and parameters of MAIL and RCPT, kept as the client wrote them.
//! - `received`: the `Received:` trace header.
//! - `conn` and `data_reader`: the bytes in and out, and the DATA section.
//! - `reply`: every reply text, and how throttle and upstream outcomes become replies.

mod auth;
mod conn;
mod data;
mod data_reader;
mod deliver;
mod ehlo;
mod forward;
mod help;
mod mail;
mod path;
mod rcpt;
mod received;
pub mod reply;
mod reputation;
mod rset;
mod session;
mod starttls;
mod verdict;
mod vrfy;
mod waiter;

pub use data_reader::{DataProblem, DataReader};

use std::net::SocketAddr;
use std::sync::Arc;

use crate::state::context::Context;
use crate::state::shutdown::Shutdown;

/// Runs one client's session on `stream` until it ends.
pub async fn serve(
    ctx: Arc<Context>,
    stream: Box<dyn conn::AsyncStream>,
    peer: SocketAddr,
    shutdown: Shutdown,
    tls: bool,
) {
    let smtp = &ctx.setup.config.smtp;
    let idle = std::time::Duration::from_millis(smtp.idle_timeout_ms.get());
    let conn = conn::Conn::new(stream, idle, smtp.max_line_bytes.get());
    // Held here and lent to `run`: an `async fn` taking the session by value would keep two
    // copies of it in the task.
    let mut session = session::Session::new(ctx, conn, peer, shutdown, tls);
    session.run().await;
}

/// Tells a client over the connection bound why it is turned away, then closes.
pub async fn refuse(stream: &mut dyn conn::AsyncStream, reply: &reply::Reply) {
    use tokio::io::AsyncWriteExt;
    let mut out = Vec::new();
    reply.write_to(&mut out);
    let _ = stream.write_all(&out).await;
    let _ = stream.shutdown().await;
}

pub use conn::AsyncStream;
