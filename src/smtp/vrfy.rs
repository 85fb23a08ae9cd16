//! VRFY: a relay cannot verify mailboxes it does not own; 252 is RFC 5321 3.5.3's answer for
//! "will accept and try".

use super::session::Session;
use crate::reply;

impl Session {
    pub fn vrfy(&mut self) {
        self.reply(reply::cannot_vrfy());
    }
}
