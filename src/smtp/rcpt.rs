//! RCPT TO: adds a recipient, up to `max_recipients`. Past it the answer is `452 4.5.3`
//! (RFC 5321 4.5.3.1.10): the client sends the rest in another transaction.

use std::borrow::Cow;

use smtp_proto::RcptTo;

use super::reply::{self, Reply};
use super::session::Session;

impl Session {
    pub fn rcpt(&mut self, to: RcptTo<Cow<'_, str>>) {
        let max = self.ctx.config.smtp.max_recipients.get();
        let Some(envelope) = self.envelope.as_mut() else {
            return self.reply(reply::bad_sequence("Need MAIL before RCPT"));
        };
        let address = to.address.trim();
        if address.is_empty() {
            return self.reply(Reply::new(501, "5.1.3", "Empty recipient address"));
        }
        if envelope.rcpts.len() >= max {
            return self.reply(reply::too_many_recipients(max));
        }
        envelope.rcpts.push(address.to_string());
        self.reply(Reply::new(250, "2.1.5", "Recipient ok"));
    }
}
