//! [`Message`]: one message as the pipeline carries it, whoever received it.

use std::net::SocketAddr;

use crate::message::Envelope;
use crate::policy::Identity;

/// One message with its identity: the envelope as the client gave it, the client's bytes,
/// what the relay read of them, and the fields it puts in front (our `Received:`, the route's
/// fields).
pub struct Message<'a> {
    /// The relay's id of the message (in our `Received:` field).
    pub id: &'a str,
    pub envelope: &'a Envelope,
    /// The message as the client sent it (headers and body, CRLF line endings, not
    /// dot-stuffed, without the final `.`).
    pub body: &'a [u8],
    pub identity: &'a Identity,
    /// Our fields, written before the client's bytes.
    pub added: &'a [u8],
    /// The client's address, for the log line.
    pub peer: SocketAddr,
}

impl Message<'_> {
    /// What goes upstream, in pieces sent one after the other with no copy of the whole:
    /// our fields, then the client's bytes as runs between the key headers.
    pub fn pieces(&self) -> Vec<&[u8]> {
        std::iter::once(self.added)
            .chain(self.identity.forwarded(self.body))
            .collect()
    }
}
