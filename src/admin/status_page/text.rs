//! Text on the page: values escaped (keys and layer names may come from clients), durations
//! in words.

use std::time::Duration;

/// `12 s`, `3 min 20 s`, `5 h 2 min`, `2 d 3 h`: the two largest units.
pub(super) fn duration_text(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

/// `250 ms`, `1.5 s`.
pub(super) fn millis_text(d: Duration) -> String {
    match d.as_millis() {
        ms @ 0..1000 => format!("{ms} ms"),
        _ => format!("{:.1} s", d.as_secs_f64()),
    }
}

/// Text as HTML text or attribute value.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() || invisible_format(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Characters that change how the text around them is shown without being seen themselves:
/// bidirectional embeddings, overrides and isolates (U+202A-202E, U+2066-2069), marks
/// (U+200E/200F, U+061C), zero-width characters and line or paragraph separators. A key
/// holding U+202E would otherwise show another key's name on the page.
fn invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidirectional_controls_are_never_shown_raw() {
        for c in [
            '\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{85}',
        ] {
            assert_eq!(escape(&format!("a{c}b")), "a\u{fffd}b", "{:?}", c);
        }
        assert_eq!(escape("tenant-é"), "tenant-é");
    }

    #[test]
    fn markup_and_controls_are_text() {
        assert_eq!(
            escape("<script>alert('x')</script>&\"\x1b"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;\u{fffd}"
        );
    }
}

#[cfg(test)]
mod duration_tests {
    use super::*;

    #[test]
    fn durations_read_in_their_two_largest_units() {
        let text = |s| duration_text(Duration::from_secs(s));
        assert_eq!(text(12), "12 s");
        assert_eq!(text(200), "3 min 20 s");
        assert_eq!(text(5 * 3600 + 120), "5 h 2 min");
        assert_eq!(text(2 * 86400 + 3 * 3600 + 5), "2 d 3 h");
        assert_eq!(millis_text(Duration::from_millis(250)), "250 ms");
        assert_eq!(millis_text(Duration::from_millis(1500)), "1.5 s");
    }
}
