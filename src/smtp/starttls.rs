//! STARTTLS (RFC 3207): answer 220, then hand the connection to the TLS handshake. Whatever
//! the client pipelined after the command is thrown away unread, so plaintext cannot be
//! injected into the encrypted session (CVE-2011-0411), and everything learnt before TLS
//! (EHLO, a transaction, AUTH) is forgotten: the client starts over with EHLO.

use super::session::{Flow, Session};
use crate::reply;

impl Session {
    pub async fn starttls(&mut self) -> Flow {
        let Some(tls) = self.ctx.setup.tls.clone() else {
            self.reply(reply::not_implemented("STARTTLS"));
            return Flow::Continue;
        };
        if self.client.tls() {
            self.reply(reply::tls_already_active());
            return Flow::Continue;
        }
        self.conn.reply(&reply::ready_for_tls());
        self.conn.flush().await;
        self.conn.discard_input();
        let plain = self.conn.take_stream();
        match tls.accept(plain).await {
            Ok(encrypted) => {
                self.conn.restore(Box::new(encrypted));
                self.client.tls_started();
                self.transaction = None;
                Flow::Continue
            }
            Err(e) => {
                tracing::info!(peer = %self.client.peer(), error = %e, "STARTTLS handshake failed");
                Flow::Close
            }
        }
    }
}
