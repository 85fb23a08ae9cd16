//! EHLO and HELO: greet, reset any transaction (RFC 5321 4.1.4), and list what we offer.
//! STARTTLS is listed only before TLS; AUTH only under TLS unless `allow_plaintext_auth`.

use super::auth;
use super::client::Greeting;
use super::session::Session;
use crate::reply::Reply;

impl Session {
    pub fn ehlo(&mut self, name: &str, esmtp: bool) {
        self.transaction = None;
        self.client.greet(Greeting {
            name: name.to_string(),
            esmtp,
        });
        let hostname = self.ctx.setup.config.smtp.hostname.clone();
        if !esmtp {
            return self.reply(Reply::raw(250, hostname));
        }
        let mut lines = vec![
            hostname,
            "PIPELINING".to_string(),
            format!("SIZE {}", self.ctx.setup.config.max_message_bytes()),
            "8BITMIME".to_string(),
            "SMTPUTF8".to_string(),
            "ENHANCEDSTATUSCODES".to_string(),
        ];
        if self.ctx.setup.tls.is_some() && !self.client.tls() {
            lines.push("STARTTLS".to_string());
        }
        if auth::offered(&self.ctx.setup.config.smtp, self.client.tls()) {
            lines.push("AUTH PLAIN LOGIN".to_string());
        }
        // RFC 9422: clients that know LIMITS split a message themselves instead of being
        // refused recipients, or waiting for a cost no bucket can hold.
        lines.push(format!("LIMITS RCPTMAX={}", self.ctx.setup.rcpt_max));
        self.reply(Reply {
            code: 250,
            esc: "",
            lines: lines.into_iter().map(Into::into).collect(),
        });
    }
}
