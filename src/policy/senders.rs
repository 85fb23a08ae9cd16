//! Whom a message claims to be from: the addresses of its `From:` fields (RFC 5322 3.6.2:
//! mailboxes and groups, display names with encoded words, read by `mailparse`), and the AUTH
//! user's `senders` they are held to. A null or matching envelope sender does not let a
//! message claim another `From:`: recipients see the field, not the envelope.

use crate::config::Senders;
use crate::message::header::Fields;

/// The AUTH user a message came from, when that user has `senders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub user: String,
    pub senders: Senders,
}

/// A field value that is not read as addresses is shown at most this long.
const MAX_SHOWN: usize = 256;

impl Binding {
    /// The first of `from` outside the user's `senders`, if any.
    pub fn first_outside<'a>(&self, from: &'a [String]) -> Option<&'a str> {
        from.iter()
            .map(String::as_str)
            .find(|address| !self.senders.allow(address))
    }
}

/// The addresses of every `From:` field, in message order. A field that cannot be read as
/// addresses gives its value as written (unfolded, trimmed, cut): it matches no pattern, so a
/// user with `senders` cannot pass an unreadable `From:` that a mail reader might show.
pub fn from_addresses(message: &[u8], fields: &Fields<'_>) -> Vec<String> {
    let mut addresses = Vec::new();
    let from = (fields.all().iter()).filter(|f| {
        message[f.name.clone()]
            .trim_ascii()
            .eq_ignore_ascii_case(b"from")
    });
    for field in from {
        let raw = &message[field.whole.clone()];
        let parsed = mailparse::parse_header(raw)
            .ok()
            .and_then(|(header, _)| mailparse::addrparse_header(&header).ok());
        match parsed {
            Some(list) => addresses.extend(list.iter().flat_map(mailboxes)),
            None => addresses.push(as_written(&raw[field.name.end - field.whole.start + 1..])),
        }
    }
    addresses
}

/// The addresses of one mailbox or group.
fn mailboxes(addr: &mailparse::MailAddr) -> Vec<String> {
    match addr {
        mailparse::MailAddr::Single(one) => vec![one.addr.clone()],
        mailparse::MailAddr::Group(group) => group.addrs.iter().map(|a| a.addr.clone()).collect(),
    }
}

fn as_written(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let unfolded: Vec<&str> = text.split_whitespace().collect();
    unfolded.join(" ").chars().take(MAX_SHOWN).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(message: &[u8]) -> Vec<String> {
        from_addresses(message, &Fields::new(message))
    }

    #[test]
    fn every_address_of_every_from_field_is_read() {
        let message = b"Subject: x\r\nFrom: \"Billing, Acme\" <billing@acme.example>,\r\n \
                        =?utf-8?q?C=C3=A9o?= <ceo@globex.example>\r\n\
                        FROM: team: a@acme.example, b@shared.example;\r\n\r\nFrom: body@x\r\n";
        assert_eq!(
            from(message),
            [
                "billing@acme.example",
                "ceo@globex.example",
                "a@acme.example",
                "b@shared.example"
            ]
        );
        assert!(from(b"Subject: none\r\n\r\n").is_empty());
    }

    #[test]
    fn a_binding_finds_the_first_address_outside() {
        let senders = crate::config::Senders::from(vec![crate::config::SenderPattern::Domain(
            "acme.example".into(),
        )]);
        let binding = Binding {
            user: "acme".into(),
            senders,
        };
        let read = from(b"From: a@ACME.example, ceo@globex.example\r\n\r\n");
        assert_eq!(binding.first_outside(&read), Some("ceo@globex.example"));
        assert_eq!(binding.first_outside(&read[..1]), None);
    }
}
