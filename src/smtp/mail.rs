//! MAIL FROM: opens a transaction. Relay permission is decided here (RFC 5321 leaves it to
//! the server; refusing at MAIL spares the client sending recipients and data for nothing).

use std::borrow::Cow;

use smtp_proto::{MailFrom, MAIL_BODY_8BITMIME, MAIL_SMTPUTF8};

use super::reply::{self, Reply};
use super::session::Session;
use crate::upstream::Envelope;

impl Session {
    pub fn mail(&mut self, from: MailFrom<Cow<'_, str>>) {
        if self.envelope.is_some() {
            return self.reply(reply::bad_sequence("Nested MAIL command"));
        }
        // A transaction runs whole on the newest config (SIGHUP); one in flight keeps its own.
        self.ctx = self.ctx.latest();
        if !self.may_relay() {
            return self.reply(reply::auth_required());
        }
        let max = self.ctx.config.smtp.max_message_bytes.get();
        if from.size > max {
            return self.reply(reply::message_too_big(max));
        }
        let address = from.address.trim();
        self.envelope = Some(Envelope {
            // `<>` is the null sender of bounces: it must stay null upstream.
            from: (!address.is_empty()).then(|| address.to_string()),
            rcpts: Vec::new(),
            smtputf8: from.flags & MAIL_SMTPUTF8 != 0,
            body_8bit: from.flags & MAIL_BODY_8BITMIME != 0,
        });
        self.reply(Reply::new(250, "2.1.0", "Sender ok"));
    }

    /// Only an authenticated client, or one from `trusted_networks`, may send: anything
    /// else would make this an open relay for the upstream's sending reputation.
    fn may_relay(&self) -> bool {
        self.trusted || self.auth.is_some()
    }
}
