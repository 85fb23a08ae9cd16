//! The verbs with nothing to decide: RSET, VRFY and HELP (NOOP and QUIT are one line each in
//! the session's dispatch).

use super::reply::{self, Reply};
use super::session::Session;

impl Session {
    pub fn rset(&mut self) {
        self.envelope = None;
        self.reply(reply::ok());
    }

    /// A relay cannot verify mailboxes it does not own; 252 is RFC 5321 3.5.3's answer for
    /// "will accept and try".
    pub fn vrfy(&mut self) {
        self.reply(Reply::new(
            252,
            "2.5.0",
            "Cannot VRFY user, but will accept message and attempt delivery",
        ));
    }

    pub fn help(&mut self) {
        self.reply(Reply::new(
            214,
            "2.0.0",
            "mailsluice relays mail: EHLO HELO MAIL RCPT DATA RSET NOOP QUIT VRFY HELP",
        ));
    }
}
