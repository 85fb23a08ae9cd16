//! docs/replies.md as the tests read it: the replies of a section (each reply of a row's first
//! cell, between backquotes), and a reply as a pattern (`{...}` and `...` match anything), so
//! that a test matches what the relay sent against the row's full text.

/// The docs page, read from the crate's root (where `cargo test` runs each test binary).
pub const REPLIES: &str = "docs/replies.md";

pub fn docs() -> String {
    std::fs::read_to_string(REPLIES).unwrap_or_else(|e| panic!("{REPLIES}: {e}"))
}

/// The replies of the section `heading` (`## ...`), up to the next section or the `mx://`
/// table: each backquoted text of each row's first cell (`a` / `b` is two replies).
pub fn section(docs: &str, heading: &str) -> Vec<String> {
    let start = docs
        .find(heading)
        .unwrap_or_else(|| panic!("{heading} in {REPLIES}"));
    (docs[start + heading.len()..].lines())
        .take_while(|l| !l.starts_with("## ") && !l.starts_with("**`mx://`"))
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_string))
        .collect()
}

/// The docs' reply as a pattern over `code text`: `{...}` and `...` match anything.
pub fn pattern(reply: &str) -> regex::Regex {
    let mut re = String::from("^");
    let mut rest = reply;
    while !rest.is_empty() {
        let next = [rest.find('{'), rest.find("...")]
            .into_iter()
            .flatten()
            .min();
        let Some(at) = next else {
            re.push_str(&regex::escape(rest));
            break;
        };
        re.push_str(&regex::escape(&rest[..at]));
        re.push_str(".*");
        rest = match rest[at..].starts_with("...") {
            true => &rest[at + 3..],
            false => &rest[at + rest[at..].find('}').unwrap() + 1..],
        };
    }
    regex::Regex::new(&format!("{re}$")).unwrap()
}

/// Whether `code text`, as sent, is `reply` (a row's text).
pub fn matches(reply: &str, code: u16, text: &str) -> bool {
    pattern(reply).is_match(&format!("{code} {text}"))
}
