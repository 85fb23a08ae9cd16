//! The fields of the human-readable log format. Values come from clients (key headers, EHLO
//! names, user names) and from upstream's replies: one written raw could forge fields
//! (`key=acme outcome=throttled`) or send escape sequences to an operator's terminal. So a
//! value is written bare only when it is plainly one word; any other is quoted and escaped
//! as a Rust string literal. The JSON format needs none of this: its writer escapes.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;

/// `name=value` pairs separated by spaces, the message first, as tracing-subscriber's default
/// writes them, with every value that is not [`plain`] quoted (`"a b"`, `"\u{1b}[2J"`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SafeFields;

impl<'writer> FormatFields<'writer> for SafeFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = SafeVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct SafeVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl SafeVisitor<'_> {
    fn write(&mut self, field: &Field, value: &str) {
        // `log.*` fields are the `log` crate's metadata, shown elsewhere by the formatter.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let sep = if self.first { "" } else { " " };
        self.first = false;
        let w = &mut self.writer;
        self.result = match field.name() {
            "message" => w.write_str(sep).and_then(|()| write_message(w, value)),
            name if plain(value) => write!(w, "{sep}{name}={value}"),
            name => write!(w, "{sep}{name}={value:?}"),
        };
    }
}

impl Visit for SafeVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.write(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, &format!("{value:?}"));
    }
}

/// A message is prose: spaces stay, control characters (newlines, ESC) are escaped.
fn write_message(w: &mut Writer<'_>, message: &str) -> fmt::Result {
    for c in message.chars() {
        if c.is_control() {
            write!(w, "{}", c.escape_default())?;
        } else {
            w.write_char(c)?;
        }
    }
    Ok(())
}

/// Printable ASCII without space, `=`, quotes or backslash: cannot end the field, start
/// another or be mistaken for a quoted one.
pub fn plain(value: &str) -> bool {
    !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '=' | '"' | '\\'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn plain_values_are_single_words() {
        assert!(plain("127.0.0.1:2525"));
        assert!(plain("[::1]:25"));
        assert!(plain("acme"));
        for v in ["", "a b", "a=b", "\"a\"", "a\\b", "\u{1b}[2J", "é", "a\nb"] {
            assert!(!plain(v), "{v:?}");
        }
    }

    #[test]
    fn forged_fields_and_escapes_are_quoted() {
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(SafeFields)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let key = "acme outcome=throttled layer=fake\x1b[2J";
            tracing::info!(key = %key, peer = "1.2.3.4:5", n = 3, "message\nforged=1");
        });
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains(
                r#"message\nforged=1 key="acme outcome=throttled layer=fake\u{1b}[2J" peer=1.2.3.4:5 n=3"#
            ),
            "{text}"
        );
        assert!(
            !text.contains('\x1b') && text.lines().count() == 1,
            "{text}"
        );
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
