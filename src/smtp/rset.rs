//! RSET: the open transaction is dropped, the greeting and AUTH stay (RFC 5321 4.1.1.5).

use super::session::Session;
use crate::reply;

impl Session {
    pub fn rset(&mut self) {
        self.transaction = None;
        self.reply(reply::ok());
    }
}
