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

    /// The value of the first field called `name` (case-insensitive), as it is: the bytes
    /// after its colon, continuation lines and final CRLF included.
    pub fn value(&self, name: &str) -> Option<&'m [u8]> {
        let message = self.message;
        let field = self.all().iter().find(|f| {
            message[f.name.clone()]
                .trim_ascii()
                .eq_ignore_ascii_case(name.as_bytes())
        })?;
        Some(&message[field.name.end + 1..field.whole.end])
    }
}

/// The fields of the header section, up to the first empty line; a line without a colon that
/// continues nothing is skipped.
pub fn fields(message: &[u8]) -> FieldList {
    let mut fields = FieldList::new();
    let mut pos = 0;
    while pos < message.len() {
        let end = line_end(message, pos);
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

/// The end of the line that starts at `pos`: just past its CRLF, or the message's end. An LF
/// alone does not end a line. Searched for the LF (the one-byte search is the fastest, and
/// a header line is short), then its CR checked.
fn line_end(message: &[u8], pos: usize) -> usize {
    let mut from = pos;
    while let Some(at) = memchr::memchr(b'\n', &message[from..]) {
        let lf = from + at;
        if lf > pos && message[lf - 1] == b'\r' {
            return lf + 1;
        }
        from = lf + 1;
    }
    message.len()
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

    /// A line ends just past a CRLF, wherever the CR and LF fall in the bytes; an LF or a CR
    /// alone ends nothing: the same ends as a search for CRLF.
    #[test]
    fn a_line_ends_at_a_crlf_only() {
        let by_crlf = |message: &[u8], pos: usize| {
            memchr::memmem::find(&message[pos..], b"\r\n").map_or(message.len(), |i| pos + i + 2)
        };
        let samples: [&[u8]; 8] = [
            b"a: b\r\nc: d\r\n\r\nbody",
            b"a: b\nc: d\r\n",
            b"a: b\rc\r\n",
            b"\n\r\n",
            b"\r\n",
            b"a: no end",
            b"a:\r\r\n\n\r\n",
            b"",
        ];
        for message in samples {
            for pos in 0..message.len() {
                assert_eq!(
                    line_end(message, pos),
                    by_crlf(message, pos),
                    "{message:?} at {pos}"
                );
            }
        }
    }
}
