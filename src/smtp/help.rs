//! HELP: the verbs this relay knows.

use super::session::Session;
use crate::reply;

impl Session {
    pub fn help(&mut self) {
        self.reply(reply::help());
    }
}
