//! The checks a transaction passes before anything is sent upstream, shared by every
//! forwarder that plays one (`smtp://`, and each domain's share of an `mx://` message).

use std::time::Duration;

use super::wire::{bad, dot_after_bare_line_break, path};
use super::Transaction;
use crate::message::Envelope;
use crate::upstream::reply::rejected;
use crate::upstream::UpstreamError;

impl<'a> Transaction<'a> {
    /// Checks what can be checked before talking to upstream: address forms, and the bare
    /// CR or LF next to a dot that a smuggling attempt needs. `message` is the message in
    /// pieces, sent one after the other. Set `pipelining` per connection.
    pub(in crate::upstream) fn new(
        envelope: &'a Envelope,
        message: &'a [&'a [u8]],
        timeout: Duration,
    ) -> Result<Transaction<'a>, UpstreamError> {
        let from = match &envelope.from {
            None => None,
            Some(a) => Some(path(a, false).ok_or_else(|| rejected(553, "5.1.7", bad(a)))?),
        };
        let mut rcpts = Vec::with_capacity(envelope.rcpts.len());
        for r in &envelope.rcpts {
            rcpts.push(path(r, true).ok_or_else(|| rejected(553, "5.1.3", bad(r)))?);
        }
        if rcpts.is_empty() {
            return Err(rejected(503, "5.5.1", "no valid recipients".into()));
        }
        // Each piece but the last ends with a CRLF (pieces are whole header fields and what
        // follows them), so no bare line break can straddle two.
        if message.iter().any(|piece| dot_after_bare_line_break(piece)) {
            return Err(rejected(
                554,
                "5.6.0",
                "message has a bare CR or LF next to a dot; not relayed (SMTP smuggling)".into(),
            ));
        }
        Ok(Transaction {
            envelope,
            from,
            rcpts,
            message,
            timeout,
            pipelining: false,
        })
    }
}
