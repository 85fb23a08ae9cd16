//! The header section's fields by byte range, continuation lines folded into their field:
//! what the relay reads (key headers, SES's conventions) without copying the message.

use std::ops::Range;

/// One header field: the range of its name (before the colon) and of the whole field,
/// continuation lines and final CRLF included.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: Range<usize>,
    pub whole: Range<usize>,
}

/// The fields of the header section, up to the first empty line; a line without a colon that
/// continues nothing is skipped.
pub fn fields(message: &[u8]) -> Vec<Field> {
    let mut fields: Vec<Field> = Vec::new();
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
