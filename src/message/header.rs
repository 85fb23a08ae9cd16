//! The header section's fields by byte range, continuation lines folded into their field:
//! what the relay reads (key headers, SES's conventions) without copying the message.

use std::cell::OnceCell;
use std::ops::Range;

use smallvec::SmallVec;

/// One header field: the range of its name (before the colon) and of the whole field,
/// continuation lines and final CRLF included.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: Range<usize>,
    pub whole: Range<usize>,
}

/// The fields of one header section: a usual one's fit without an allocation (every message's
/// fields are found, for its hops).
pub type FieldList = SmallVec<[Field; 16]>;

/// A message's header fields, found when first asked for, then kept: every reader of the
/// header section (keys, routes, hops, `traceparent`) reads them from this one pass.
pub struct Fields<'m> {
    message: &'m [u8],
    found: OnceCell<FieldList>,
}

impl<'m> Fields<'m> {
    pub fn new(message: &'m [u8]) -> Fields<'m> {
        Fields {
            message,
            found: OnceCell::new(),
        }
    }

    /// The fields, as [`fields`] finds them.
    pub fn all(&self) -> &[Field] {
        self.found.get_or_init(|| fields(self.message))
    }
}

/// The fields of the header section, up to the first empty line; a line without a colon that
/// continues nothing is skipped.
pub fn fields(message: &[u8]) -> FieldList {
    let mut fields = FieldList::new();
    let mut pos = 0;
    // Built once: a searcher is set up anew for each `memmem::find`.
    let crlf = memchr::memmem::Finder::new(b"\r\n");
    while pos < message.len() {
        let end = crlf
            .find(&message[pos..])
            .map_or(message.len(), |i| pos + i + 2);
        let line = &message[pos..end];
        if line == b"\r\n" {
            break;
        }
        match (line.first(), fields.last_mut()) {
            (Some(b' ' | b'\t'), Some(last)) => last.whole.end = end,
            _ => {
                if let Some(colon) = memchr::memchr(b':', line) {
                    fields.push(Field {
                        name: pos..pos + colon,
                        whole: pos..end,
                    });
                }
            }
        }
        pos = end;
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found when first asked for, then kept: what `fields` finds.
    #[test]
    fn fields_are_found_on_first_asking() {
        let message = b"Subject: a\r\n b\r\nX-Tenant: t\r\nno colon\r\n\r\nBody: not a field\r\n";
        let lazy = Fields::new(message);
        assert!(
            lazy.found.get().is_none(),
            "nothing found before it is asked"
        );
        let names: Vec<&[u8]> = lazy
            .all()
            .iter()
            .map(|f| &message[f.name.clone()])
            .collect();
        assert_eq!(names, [&b"Subject"[..], b"X-Tenant"]);
        assert_eq!(
            &message[lazy.all()[0].whole.clone()],
            b"Subject: a\r\n b\r\n"
        );
        assert_eq!(lazy.all().len(), fields(message).len());
        assert!(Fields::new(b"").all().is_empty());
    }
}
