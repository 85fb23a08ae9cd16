//! Whom a message claims to be from: the addresses of its `From:` fields (RFC 5322 3.6.2:
//! mailboxes and groups, display names with encoded words), read strictly as an address list
//! (`address_list`), and the AUTH user's `senders` they are held to. A null or matching
//! envelope sender does not let a message claim another `From:`: recipients see the field,
//! not the envelope; and a field a mail reader could read otherwise than the relay does is
//! refused, not guessed at.

mod address_list;

use crate::config::Senders;
use crate::message::header::Fields;

/// The AUTH user a message came from, when that user has `senders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub user: String,
    pub senders: Senders,
}

/// Why a message's `From:` fields fail a user's binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromRefusal<'a> {
    /// The message has no `From:` field: it would claim no one here, and whatever a later
    /// hop or a mail reader makes up.
    Missing,
    /// A `From:` field that is not exactly an address list with a mailbox.
    Unreadable,
    /// An address outside the user's `senders`.
    Outside(&'a str),
}

/// A field value that is not read as addresses is shown at most this long.
const MAX_SHOWN: usize = 256;

impl Binding {
    /// Why `from` (as [`from_addresses`] gives it) fails the binding, at its first entry that
    /// does; `None` when every address is inside the user's `senders`.
    pub fn refusal<'a>(&self, from: &'a [String]) -> Option<FromRefusal<'a>> {
        if from.is_empty() {
            return Some(FromRefusal::Missing);
        }
        let first = from
            .iter()
            .find(|entry| !address_list::is_addr_spec(entry) || !self.senders.allow(entry))?;
        match address_list::is_addr_spec(first) {
            true => Some(FromRefusal::Outside(first)),
            false => Some(FromRefusal::Unreadable),
        }
    }
}

/// The addresses of every `From:` field, in message order, each a bare `addr-spec`. A field
/// that is not exactly an address list with a mailbox gives its value as written (unfolded,
/// trimmed, cut) instead: never an `addr-spec` itself, so it is told apart from an address,
/// and it matches no identity upstream either.
pub fn from_addresses(message: &[u8], fields: &Fields<'_>) -> Vec<String> {
    let mut addresses = Vec::new();
    let from = (fields.all().iter()).filter(|f| {
        message[f.name.clone()]
            .trim_ascii()
            .eq_ignore_ascii_case(b"from")
    });
    for field in from {
        let value = &message[field.name.end + 1..field.whole.end];
        let value = value.strip_suffix(b"\r\n").unwrap_or(value);
        // A byte that is not UTF-8 reads as U+FFFD: in no domain or address of `senders`.
        let value = String::from_utf8_lossy(value);
        match address_list::read(&value) {
            Some(list) if !list.is_empty() => addresses.extend(list),
            _ => addresses.push(as_written(&value)),
        }
    }
    addresses
}

/// An unreadable value as written: unfolded and trimmed, and past [`MAX_SHOWN`] characters
/// cut and ended with `...` (a text that ends with a dot is no `addr-spec`; an uncut one is
/// none either, or the field would have been read as it).
fn as_written(value: &str) -> String {
    let text = address_list::unfold(value);
    let text = text.trim_matches([' ', '\t']);
    match text.chars().nth(MAX_SHOWN) {
        None => text.to_string(),
        Some(_) => text.chars().take(MAX_SHOWN).chain("...".chars()).collect(),
    }
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
        assert_eq!(
            binding.refusal(&read),
            Some(FromRefusal::Outside("ceo@globex.example"))
        );
        assert_eq!(binding.refusal(&read[..1]), None);
        assert_eq!(binding.refusal(&[]), Some(FromRefusal::Missing));
        let two_ways = from(b"From: a@acme.example, ceo@globex.example (@acme.example\r\n\r\n");
        assert_eq!(binding.refusal(&two_ways), Some(FromRefusal::Unreadable));
        assert_eq!(
            binding.refusal(&from(b"From: undisclosed:;\r\n\r\n")),
            Some(FromRefusal::Unreadable)
        );
    }

    #[test]
    fn an_unreadable_field_is_shown_as_written_and_is_never_an_address() {
        let long = format!("From: a@acme.example{} (\r\n\r\n", ".b".repeat(200));
        let shown = from(long.as_bytes());
        assert!(shown[0].starts_with("a@acme.example.b") && shown[0].ends_with("..."));
        assert!(!address_list::is_addr_spec(&shown[0]));
        let folded = from(b"From: ceo@globex.example\r\n (@acme.example\r\n\r\n");
        assert_eq!(folded, ["ceo@globex.example (@acme.example"]);
        assert_eq!(
            from(b"From: \xff@acme.example\r\n\r\n"),
            ["\u{FFFD}@acme.example"]
        );
    }
}
