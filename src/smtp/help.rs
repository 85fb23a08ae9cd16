//! HELP: the verbs this relay knows.

use super::session::Session;
use crate::reply::Reply;

impl Session {
    pub fn help(&mut self) {
        self.reply(Reply::new(
            214,
            "2.0.0",
            "mailsluice relays mail: EHLO HELO MAIL RCPT DATA RSET NOOP QUIT VRFY HELP",
        ));
    }
}
