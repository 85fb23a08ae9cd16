//! The path and ESMTP parameters of MAIL and RCPT (RFC 5321 4.1.2, with RFC 6531's UTF-8),
//! read from the command line itself. smtp-proto's parser drops the quotes of a quoted local
//! part (which changes the address, and upstream could read its spaces as parameters), refuses
//! address literals, turns `<postmaster>` into the null path, and wraps long `SIZE` values;
//! here the path is kept as the client wrote it, so that upstream receives that very text.

use std::net::{Ipv4Addr, Ipv6Addr};

/// RFC 5321 4.5.3.1.3: a path is at most 256 octets, its brackets included.
const MAX_PATH: usize = 254;

/// A character of RFC 6531's `UTF8-non-ascii`, controls (C1) excepted.
fn utf8_non_ascii(c: char) -> bool {
    !c.is_ascii() && !c.is_control()
}

/// What follows `keyword` (`FROM`, `TO`) and its colon at the start of `rest`, if they are there.
pub fn after_keyword<'a>(rest: &'a str, keyword: &str) -> Option<&'a str> {
    let head = rest.get(..keyword.len())?;
    if !head.eq_ignore_ascii_case(keyword) {
        return None;
    }
    rest[keyword.len()..]
        .trim_start_matches(' ')
        .strip_prefix(':')
}

/// Why a MAIL or RCPT line was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is not one of RFC 5321's (with RFC 6531's UTF-8).
    #[error("syntax error in the path")]
    Syntax,
    /// What follows the path is not ` KEYWORD[=value]` parameters.
    #[error("syntax error in the parameters")]
    Parameters,
    /// Valid syntax that we still refuse: `<` or `>` inside a quoted local part, which a next
    /// hop that ends the path at the first `>` would read as the start of parameters.
    #[error("angle bracket inside a quoted local part")]
    AngleInQuotes,
}

/// A MAIL FROM or RCPT TO line, split: the mailbox as written (source route dropped, as RFC
/// 5321 4.1.1.3 allows), empty for `<>`, and the parameters after it.
#[derive(Debug, PartialEq, Eq)]
pub struct PathLine<'a> {
    pub mailbox: &'a str,
    pub params: Vec<Param<'a>>,
}

/// One `keyword[=value]` parameter.
#[derive(Debug, PartialEq, Eq)]
pub struct Param<'a> {
    pub keyword: &'a str,
    pub value: Option<&'a str>,
}

/// Parses what follows `MAIL FROM:` or `RCPT TO:`. `<>` is left for the caller to allow
/// (MAIL) or refuse (RCPT), as is `<postmaster>` (RCPT only).
pub fn parse(rest: &str) -> Result<PathLine<'_>, PathError> {
    let rest = rest.trim_start_matches(' ');
    let path = rest.strip_prefix('<').ok_or(PathError::Syntax)?;
    let inner = skip_source_route(path)?;
    let (mailbox, after) = if let Some(after) = inner.strip_prefix('>') {
        if inner.len() != path.len() {
            return Err(PathError::Syntax); // a route to nowhere: `<@a.test:>`
        }
        ("", after)
    } else {
        let len = mailbox_len(inner)?;
        let after = inner[len..].strip_prefix('>').ok_or(PathError::Syntax)?;
        (&inner[..len], after)
    };
    if mailbox.len() > MAX_PATH {
        return Err(PathError::Syntax);
    }
    let params = parameters(after)?;
    Ok(PathLine { mailbox, params })
}

/// Whether `mailbox` is the bare `postmaster` RFC 5321 4.5.1 lets RCPT name without a domain.
pub fn is_postmaster(mailbox: &str) -> bool {
    mailbox.eq_ignore_ascii_case("postmaster")
}

/// `@a.test,@b.test:` in front of the mailbox: accepted and ignored (RFC 5321 4.1.1.3).
fn skip_source_route(inner: &str) -> Result<&str, PathError> {
    if !inner.starts_with('@') {
        return Ok(inner);
    }
    let (route, rest) = inner.split_once(':').ok_or(PathError::Syntax)?;
    for hop in route.split(',') {
        let domain = hop.strip_prefix('@').ok_or(PathError::Syntax)?;
        if domain_len(domain)? != domain.len() {
            return Err(PathError::Syntax);
        }
    }
    Ok(rest)
}

/// The length of the mailbox at the start of `s`: `postmaster`, or local part `@` domain.
fn mailbox_len(s: &str) -> Result<usize, PathError> {
    let local = local_part_len(s)?;
    if s[local..].starts_with('>') && is_postmaster(&s[..local]) {
        return Ok(local);
    }
    let domain = s[local..].strip_prefix('@').ok_or(PathError::Syntax)?;
    Ok(local + 1 + domain_len(domain)?)
}

/// A dot-string or a quoted-string; RFC 6531 allows UTF-8 in both.
fn local_part_len(s: &str) -> Result<usize, PathError> {
    if s.starts_with('"') {
        return quoted_len(s);
    }
    let atext = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    let len = s
        .find(|c: char| !(atext(c) || c == '.' || utf8_non_ascii(c)))
        .unwrap_or(s.len());
    let dot_string = &s[..len];
    if dot_string.is_empty() || dot_string.split('.').any(str::is_empty) {
        return Err(PathError::Syntax);
    }
    Ok(len)
}

/// `"..."` with `\` quoting one printable character; the closing quote included.
fn quoted_len(s: &str) -> Result<usize, PathError> {
    let mut chars = s.char_indices().skip(1);
    let mut angle = false;
    while let Some((i, c)) = chars.next() {
        match c {
            '"' if angle => return Err(PathError::AngleInQuotes),
            '"' => return Ok(i + 1),
            '\\' => match chars.next() {
                Some((_, q)) if (' '..='~').contains(&q) => angle |= q == '<' || q == '>',
                _ => return Err(PathError::Syntax),
            },
            '<' | '>' => angle = true,
            c if (' '..='~').contains(&c) || utf8_non_ascii(c) => {}
            _ => return Err(PathError::Syntax),
        }
    }
    Err(PathError::Syntax)
}

/// The length of the domain at the start of `s`: a name (UTF-8 labels allowed, RFC 6531) or
/// an IPv4 or IPv6 address literal (the only standardized tag, RFC 5321 4.1.3).
pub fn domain_len(s: &str) -> Result<usize, PathError> {
    if let Some(literal) = s.strip_prefix('[') {
        let end = literal.find(']').ok_or(PathError::Syntax)?;
        return match address_literal(&literal[..end]) {
            true => Ok(end + 2),
            false => Err(PathError::Syntax),
        };
    }
    let len = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.' || utf8_non_ascii(c)))
        .unwrap_or(s.len());
    let name = &s[..len];
    let label_ok = |l: &str| !l.is_empty() && !l.starts_with('-') && !l.ends_with('-');
    if name.len() > 255 || !name.split('.').all(label_ok) {
        return Err(PathError::Syntax);
    }
    Ok(len)
}

/// What is inside `[...]`: `1.2.3.4` or `IPv6:...`.
pub fn address_literal(inside: &str) -> bool {
    match inside.get(..5) {
        Some(tag) if tag.eq_ignore_ascii_case("IPv6:") => inside[5..].parse::<Ipv6Addr>().is_ok(),
        _ => inside.parse::<Ipv4Addr>().is_ok(),
    }
}

/// ` KEY[=value]` pairs, as in RFC 5321 4.1.2 (`esmtp-param`), spaces between them.
fn parameters(s: &str) -> Result<Vec<Param<'_>>, PathError> {
    if !s.is_empty() && !s.starts_with(' ') {
        return Err(PathError::Parameters);
    }
    let mut params = Vec::new();
    for word in s.split(' ').filter(|w| !w.is_empty()) {
        let (keyword, value) = match word.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (word, None),
        };
        let keyword_ok = keyword.starts_with(|c: char| c.is_ascii_alphanumeric())
            && keyword
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-');
        let value_char = |c: char| ('!'..='~').contains(&c) && c != '=' || utf8_non_ascii(c);
        let value_ok = value.is_none_or(|v| !v.is_empty() && v.chars().all(value_char));
        if !keyword_ok || !value_ok {
            return Err(PathError::Parameters);
        }
        params.push(Param { keyword, value });
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mailbox(s: &str) -> Result<&str, PathError> {
        parse(s).map(|p| p.mailbox)
    }

    #[test]
    fn mailboxes_are_kept_as_written() {
        for m in [
            "a@b.test",
            r#""a b"@c.test"#,
            r#""a@b"@c.test"#,
            r#""a\"b\\c"@d.test"#,
            "user@[127.0.0.1]",
            "user@[IPv6:::1]",
            "é.ü@dömäin.test",
            "postmaster",
            "PostMaster",
        ] {
            assert_eq!(mailbox(&format!("<{m}>")), Ok(m), "{m}");
        }
        assert_eq!(mailbox("<>"), Ok(""));
        assert_eq!(mailbox(" <@r.test,@s.test:a@b.test>"), Ok("a@b.test"));
    }

    #[test]
    fn malformed_mailboxes_are_syntax_errors() {
        for m in [
            "a@b.test",
            "<a@b.test",
            "<a>",
            "<a@>",
            "<@b>",
            "<a..b@c>",
            "<.a@c>",
            "<a.@c>",
            "<a b@c>",
            "<\"a@c>",
            "<a@[1.2.3]>",
            "<a@[IPv6:x]>",
            "<a@[tag:x]>",
            "<a@c->",
            "<a@c..d>",
            "<\"a\x01\"@c>",
            "<@r:>",
            "<@r a@b>",
        ] {
            assert_eq!(mailbox(m), Err(PathError::Syntax), "{m:?}");
        }
    }

    #[test]
    fn angle_brackets_in_quotes_are_refused_apart() {
        for m in [r#"<"a>b"@c>"#, r#"<"a<b"@c>"#, r#"<"a\>b"@c>"#] {
            assert_eq!(mailbox(m), Err(PathError::AngleInQuotes), "{m}");
        }
    }

    #[test]
    fn parameters_follow_the_path() {
        let p = parse("<a@b> SIZE=10  BODY=8BITMIME SMTPUTF8").unwrap();
        assert_eq!(
            p.params,
            [
                Param {
                    keyword: "SIZE",
                    value: Some("10")
                },
                Param {
                    keyword: "BODY",
                    value: Some("8BITMIME")
                },
                Param {
                    keyword: "SMTPUTF8",
                    value: None
                },
            ]
        );
        for bad in [
            "<a@b>SIZE=1",
            "<a@b> SIZE=",
            "<a@b> =1",
            "<a@b> BODY=8BITMIME=x",
        ] {
            assert_eq!(parse(bad), Err(PathError::Parameters), "{bad}");
        }
    }

    #[test]
    fn paths_are_bounded() {
        let long = format!("<{}@b.test>", "a".repeat(250));
        assert_eq!(mailbox(&long), Err(PathError::Syntax));
    }
}
