//! RCPT TO: adds a recipient, up to `max_recipients`. Past it the answer is `452 4.5.3`
//! (RFC 5321 4.5.3.1.10): the client sends the rest in another transaction. The address is
//! kept as written (`path`): a quoted local part stays quoted, and `<postmaster>` and address
//! literals are taken (RFC 5321 4.5.1, 4.1.3).

use super::path::{self, PathError};
use super::reputation;
use super::session::Session;
use crate::reply;

impl Session {
    pub(super) async fn rcpt(&mut self, rest: &str) {
        let Some(rest) = path::after_keyword(rest, "TO") else {
            return self.reply(reply::syntax_error(
                "expected RCPT TO:<forward-path> [parameters]",
            ));
        };
        let line = match path::parse(rest) {
            Ok(line) => line,
            Err(PathError::Syntax) => return self.reply(reply::bad_recipient_syntax()),
            Err(PathError::Parameters) => {
                return self.reply(reply::syntax_error("malformed parameter"))
            }
            Err(PathError::AngleInQuotes) => {
                return self.reply(reply::address_not_relayed("5.1.3"))
            }
        };
        // We offer no RCPT parameter: DSN's NOTIFY and ORCPT would be lost upstream.
        if let Some(param) = line.params.first() {
            return self.reply(reply::unsupported_parameter(
                &param.keyword.to_ascii_uppercase(),
            ));
        }
        let max = self.ctx.setup.config.smtp.max_recipients.get();
        let Some(transaction) = self.transaction.as_ref() else {
            return self.reply(reply::bad_sequence("Need MAIL before RCPT"));
        };
        if line.mailbox.is_empty() {
            return self.reply(reply::empty_recipient());
        }
        if transaction.rcpts() >= max {
            return self.reply(reply::too_many_recipients(max));
        }
        let suppressed = reputation::suppressed_rcpt(&self.ctx, line.mailbox).await;
        let transaction = self.transaction.as_mut().expect("checked above");
        if let Some(refusal) = suppressed {
            transaction.rcpt_suppressed();
            return self.reply(refusal);
        }
        transaction.add_rcpt(line.mailbox.to_string());
        self.reply(reply::recipient_ok());
    }
}
