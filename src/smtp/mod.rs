//! The inbound ESMTP dialogue (the accept loop is `crate::serve::server`).
//!
//! - `session`: one client's state and command loop; it dispatches each command to the file
//!   named after its verb: `ehlo`, `mail`, `rcpt`, `data`, `rset`, `vrfy`, `help`,
//!   `starttls` (upgrades the connection), `auth` (checks passwords).
//! - the session's state, grouped by what it is about: who the client is (`client`: its
//!   address, TLS, EHLO, AUTH user; the message's `Submitter` and our hop are built from it),
//!   the open transaction (`transaction`), its counts against `max_errors` and
//!   `max_junk_commands` (`counters`), its place in the running relay (`place`: its activity,
//!   the shutdown and its grace, its last message's answer).
//! - `deliver`: the final dot: the message handed to the pipeline (`pipeline::intake`: its
//!   identity, our fields, its journey or its hold), the verdict answered and accounted for
//!   once (`crate::pipeline::account`: the log line, the metrics, the spans, the webhook event).
//! - `reputation`: the tenant reputation guard's refusals before the message (MAIL, RCPT).
//! - `path`: the address and parameters of MAIL and RCPT, kept as the client wrote them.
//! - `received`: the `Received:` trace header (the session's [`crate::pipeline::Hop`]).
//! - `conn` and `data_reader`: the bytes in and out, and the DATA section.
//!
//! Every reply text is in `crate::reply`, shared with the spool's release.

mod auth;
mod client;
mod conn;
mod counters;
mod data;
mod data_reader;
mod deliver;
mod ehlo;
mod help;
mod mail;
mod path;
mod place;
mod rcpt;
mod received;
mod reputation;
mod rset;
mod session;
mod starttls;
mod transaction;
mod vrfy;

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
pub async fn refuse(stream: &mut dyn conn::AsyncStream, reply: &crate::reply::Reply) {
    use tokio::io::AsyncWriteExt;
    let mut out = Vec::new();
    reply.write_to(&mut out);
    let _ = stream.write_all(&out).await;
    let _ = stream.shutdown().await;
}

pub use conn::AsyncStream;
