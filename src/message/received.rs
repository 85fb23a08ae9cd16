//! A message's `Received:` fields as the relay reads them: how many hops it made, and whether
//! one of them is this process (the mark our own field carries). A mail loop is either: the
//! message came back, or it made more hops than the bound (RFC 5321 6.3: a loop through other
//! hosts too).

use super::header::Fields;

/// The comment after our name in the `by` clause of our `Received:` field, which says the
/// message went through this process: `(mailsluice <instance>)`.
pub struct Mark<'a>(pub &'a str);

/// What [`Mark`] writes before the instance (and `)` after it).
const MARK_OPEN: &str = "(mailsluice ";

impl Mark<'_> {
    /// Writes the mark where it goes, with no string of its own.
    pub fn write_to(&self, h: &mut String) {
        h.push_str(MARK_OPEN);
        h.push_str(self.0);
        h.push(')');
    }

    /// Whether `bytes` hold this mark (searched in every message, so with no string built).
    fn in_bytes(&self, bytes: &[u8]) -> bool {
        memchr::memmem::find_iter(bytes, MARK_OPEN).any(|at| {
            bytes[at + MARK_OPEN.len()..]
                .strip_prefix(self.0.as_bytes())
                .is_some_and(|rest| rest.first() == Some(&b')'))
        })
    }
}

/// The hops a message made before it reached us, as its `Received:` fields say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hops {
    /// Its `Received:` fields.
    pub count: usize,
    /// One of them carries this process's mark: the message came back.
    pub ours: bool,
}

/// Why a message must not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loop {
    /// It names this process in a `Received:` field already.
    CameBack,
    /// It holds more `Received:` fields than the bound.
    TooManyHops,
}

impl Hops {
    /// The `Received:` fields of the header section (`fields` of `message`), read for the mark
    /// of `instance`.
    pub fn of(message: &[u8], fields: &Fields<'_>, instance: &str) -> Hops {
        let mark = Mark(instance);
        let mut hops = Hops::default();
        for field in fields.all() {
            let name = message[field.name.clone()].trim_ascii();
            if name.eq_ignore_ascii_case(b"received") {
                hops.count += 1;
                hops.ours |= mark.in_bytes(&message[field.whole.clone()]);
            }
        }
        hops
    }

    /// Whether the message loops, with at most `max` hops allowed.
    pub fn looping(self, max: usize) -> Option<Loop> {
        match (self.ours, self.count > max) {
            (true, _) => Some(Loop::CameBack),
            (false, true) => Some(Loop::TooManyHops),
            (false, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looping(message: &[u8], instance: &str, max: usize) -> Option<Loop> {
        Hops::of(message, &Fields::new(message), instance).looping(max)
    }

    #[test]
    fn received_fields_are_counted_in_the_header_section_only() {
        let three =
            "Received: a\r\n\tb\r\nreceived: c\r\nX: (mailsluice 0123abcd)\r\nRECEIVED: d\r\n";
        let message = format!("{three}\r\nReceived: in the body\r\n");
        assert_eq!(looping(message.as_bytes(), "0123abcd", 3), None);
        assert_eq!(
            looping(message.as_bytes(), "0123abcd", 2),
            Some(Loop::TooManyHops)
        );
        let folded = "Received: from x\r\n\tby y (mailsluice 0123abcd)\r\n\r\n";
        assert_eq!(
            looping(folded.as_bytes(), "0123abcd", 50),
            Some(Loop::CameBack)
        );
        // Another process's mark, or one that only starts like ours, is not a loop.
        for other in [
            "(mailsluice 0123abcde)",
            "(mailsluice 0123abc)",
            "(mailsluice  0123abcd)",
        ] {
            let hop = format!("Received: from x by y {other} (mailsluice 9)\r\n\r\n");
            assert_eq!(looping(hop.as_bytes(), "0123abcd", 50), None, "{other}");
        }
        let second = "Received: by y (mailsluice 0123abcde) (mailsluice 0123abcd)\r\n\r\n";
        assert_eq!(
            looping(second.as_bytes(), "0123abcd", 50),
            Some(Loop::CameBack)
        );
    }
}
