//! RFC 5322's `address-list` (3.4), read strictly: mailboxes (`addr-spec` or a display name
//! and an `angle-addr`) and groups, with comments and folding white space wherever the
//! grammar has `CFWS`, UTF-8 where it has text (RFC 6532), and nothing left over. Of the
//! obsolete forms only the dot in a display name (`John Q. Public`) is read. A value read
//! two ways by two readers is what lets a message pass a check as one sender and show
//! another, so whatever this grammar does not cover is no address list at all.

/// The `addr-spec` of every mailbox of `value` (a field's value, folded or not), in order,
/// each written `local-part@domain` without its comments and white space; `None` when the
/// value is not exactly an address list.
pub fn read(value: &str) -> Option<Vec<String>> {
    let unfolded = unfold(value);
    let mut reader = Reader::new(&unfolded);
    let mut addresses = Vec::new();
    loop {
        reader.address(&mut addresses)?;
        if reader.at_end() {
            return Some(addresses);
        }
        reader.expect(b',')?;
    }
}

/// `value` with each line break before white space taken out (RFC 5322 2.2.3); any other
/// line break stays, and no grammar reads it.
pub fn unfold(value: &str) -> String {
    value.replace("\r\n ", " ").replace("\r\n\t", "\t")
}

/// Whether `text` is one `addr-spec` as [`read`] writes it: no comment, no white space
/// around it.
pub fn is_addr_spec(text: &str) -> bool {
    let mut reader = Reader::new(text);
    reader.bare_addr_spec().is_some() && reader.at_end()
}

/// A cursor over the unfolded value; every method either moves past what it read and gives
/// `Some`, or gives `None` (the caller then gives up, or starts again from a saved place).
#[derive(Clone)]
struct Reader<'a> {
    text: &'a str,
    at: usize,
}

fn is_wsp(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// `atext`, with any byte of a UTF-8 sequence (RFC 6532).
fn is_atext(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&b) || b >= 0x80
}

/// Printable US-ASCII or UTF-8: what `qtext`, `ctext` and `dtext` draw from.
fn is_vchar(b: u8) -> bool {
    (33..=126).contains(&b) || b >= 0x80
}

impl<'a> Reader<'a> {
    fn new(text: &'a str) -> Reader<'a> {
        Reader { text, at: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn at_end(&self) -> bool {
        self.at == self.text.len()
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        (self.peek() == Some(b)).then(|| self.at += 1)
    }

    /// `[CFWS]`: white space and comments, possibly none.
    fn cfws(&mut self) -> Option<()> {
        loop {
            match self.peek() {
                Some(b) if is_wsp(b) => self.at += 1,
                Some(b'(') => self.comment()?,
                _ => return Some(()),
            }
        }
    }

    /// A `comment`, nested ones included.
    fn comment(&mut self) -> Option<()> {
        self.expect(b'(')?;
        loop {
            match self.peek()? {
                b')' => return self.expect(b')'),
                b'(' => self.comment()?,
                b'\\' => self.quoted_pair()?,
                b if is_wsp(b) || (is_vchar(b) && b != b'(') => self.at += 1,
                _ => return None,
            }
        }
    }

    fn quoted_pair(&mut self) -> Option<()> {
        self.expect(b'\\')?;
        match self.peek()? {
            b if is_wsp(b) || is_vchar(b) => {
                self.at += 1;
                Some(())
            }
            _ => None,
        }
    }

    /// A `quoted-string` without its `CFWS`.
    fn quoted_string(&mut self) -> Option<()> {
        self.expect(b'"')?;
        loop {
            match self.peek()? {
                b'"' => return self.expect(b'"'),
                b'\\' => self.quoted_pair()?,
                b if is_wsp(b) || is_vchar(b) => self.at += 1,
                _ => return None,
            }
        }
    }

    /// `1*atext`.
    fn atoms(&mut self) -> Option<()> {
        let start = self.at;
        while self.peek().is_some_and(is_atext) {
            self.at += 1;
        }
        (self.at > start).then_some(())
    }

    /// `dot-atom-text`.
    fn dot_atom_text(&mut self) -> Option<()> {
        self.atoms()?;
        while self.peek() == Some(b'.') {
            self.at += 1;
            self.atoms()?;
        }
        Some(())
    }

    /// A `domain-literal` without its `CFWS`.
    fn domain_literal(&mut self) -> Option<()> {
        self.expect(b'[')?;
        loop {
            match self.peek()? {
                b']' => return self.expect(b']'),
                b'[' | b'\\' => return None,
                b if is_wsp(b) || is_vchar(b) => self.at += 1,
                _ => return None,
            }
        }
    }

    /// The text of what `read` moves past.
    fn span(&mut self, read: impl FnOnce(&mut Self) -> Option<()>) -> Option<&'a str> {
        let start = self.at;
        read(self)?;
        Some(&self.text[start..self.at])
    }

    /// `local-part "@" domain` without any `CFWS`.
    fn bare_addr_spec(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.quoted_string()?,
            _ => self.dot_atom_text()?,
        }
        self.expect(b'@')?;
        match self.peek()? {
            b'[' => self.domain_literal(),
            _ => self.dot_atom_text(),
        }
    }

    /// `addr-spec`, comments and white space around its parts left out of what it gives.
    fn addr_spec(&mut self) -> Option<String> {
        self.cfws()?;
        let local = self.span(|r| match r.peek()? {
            b'"' => r.quoted_string(),
            _ => r.dot_atom_text(),
        })?;
        self.cfws()?;
        self.expect(b'@')?;
        self.cfws()?;
        let domain = self.span(|r| match r.peek()? {
            b'[' => r.domain_literal(),
            _ => r.dot_atom_text(),
        })?;
        self.cfws()?;
        Some(format!("{local}@{domain}"))
    }

    /// `angle-addr`.
    fn angle_addr(&mut self) -> Option<String> {
        self.cfws()?;
        self.expect(b'<')?;
        let address = self.addr_spec()?;
        self.expect(b'>')?;
        self.cfws()?;
        Some(address)
    }

    /// A `display-name`: `1*word`, with the obsolete dot between words.
    fn phrase(&mut self) -> Option<()> {
        let mut words = 0;
        loop {
            self.cfws()?;
            match self.peek() {
                Some(b'"') => self.quoted_string()?,
                Some(b'.') if words > 0 => self.at += 1,
                Some(b) if is_atext(b) => self.atoms()?,
                _ => return (words > 0).then_some(()),
            }
            words += 1;
        }
    }

    /// `mailbox`: an `addr-spec` that ends where the mailbox ends, else a `name-addr`.
    fn mailbox(&mut self) -> Option<String> {
        let start = self.clone();
        if let Some(address) = self.addr_spec() {
            if matches!(self.peek(), None | Some(b',' | b';')) {
                return Some(address);
            }
        }
        *self = start.clone();
        let mut named = start;
        if named.phrase().is_some() {
            *self = named;
        }
        self.angle_addr()
    }

    /// `address`: a `mailbox`, or a `group` (`display-name ":" [group-list] ";"`).
    fn address(&mut self, addresses: &mut Vec<String>) -> Option<()> {
        let start = self.clone();
        if let Some(address) = self.mailbox() {
            if matches!(self.peek(), None | Some(b',')) {
                addresses.push(address);
                return Some(());
            }
        }
        *self = start;
        self.phrase()?;
        self.expect(b':')?;
        self.cfws()?;
        if self.peek() != Some(b';') {
            loop {
                addresses.push(self.mailbox()?);
                if self.peek() == Some(b';') {
                    break;
                }
                self.expect(b',')?;
            }
        }
        self.expect(b';')?;
        self.cfws()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mailboxes_groups_comments_and_folding_are_read() {
        for (value, read_as) in [
            ("billing@acme.example", vec!["billing@acme.example"]),
            (
                " Billing <billing@acme.example> ",
                vec!["billing@acme.example"],
            ),
            (
                "\"Acme, Inc.\" <billing@acme.example>",
                vec!["billing@acme.example"],
            ),
            (
                "billing@acme.example (Billing)",
                vec!["billing@acme.example"],
            ),
            (
                "(a (nested) one) billing @ acme.example",
                vec!["billing@acme.example"],
            ),
            (
                "John Q. Public <jqp@acme.example>",
                vec!["jqp@acme.example"],
            ),
            (
                "=?utf-8?q?C=C3=A9o?= <ceo@acme.example>",
                vec!["ceo@acme.example"],
            ),
            ("Ünïcode <ü@acme.example>", vec!["ü@acme.example"]),
            ("\"a b\"@acme.example", vec!["\"a b\"@acme.example"]),
            ("a@[192.0.2.1]", vec!["a@[192.0.2.1]"]),
            ("<a@acme.example>", vec!["a@acme.example"]),
            (
                "Billing\r\n <billing@acme.example>,\r\n\tb@acme.example",
                vec!["billing@acme.example", "b@acme.example"],
            ),
            (
                "team: a@acme.example, B <b@acme.example>;, c@acme.example",
                vec!["a@acme.example", "b@acme.example", "c@acme.example"],
            ),
            ("undisclosed:;", vec![]),
        ] {
            assert_eq!(
                read(value),
                Some(read_as.iter().map(|a| a.to_string()).collect()),
                "{value}"
            );
        }
    }

    #[test]
    fn anything_left_over_or_open_is_no_address_list() {
        for value in [
            "ceo@globex.example (@acme.example",
            "ceo@globex.example\r\n (@acme.example",
            "<ceo@globex.example>@acme.example",
            "<ceo@globex.example>billing@acme.example",
            "\"CEO\" <ceo@globex.example>x@acme.example",
            "CEO <ceo@globex.example> billing@acme.example",
            "ceo@globex.example\"@acme.example",
            "<ceo@globex.example billing@acme.example",
            "ceo@globex.example <billing@acme.example>",
            "",
            " ",
            "a@acme.example,",
            "a@acme.example,,b@acme.example",
            "team: a@acme.example",
            "a@acme.example;",
            "a..b@acme.example",
            "a@acme..example",
            "a@acme.example.",
            "\"unclosed@acme.example",
            "a@[acme.example",
            "<@route:a@acme.example>",
            ".dot <a@acme.example>",
            "a@acme.example\r\nb",
        ] {
            assert_eq!(read(value), None, "{value:?}");
        }
    }

    #[test]
    fn what_read_gives_is_a_bare_addr_spec() {
        assert!(is_addr_spec("a@acme.example"));
        assert!(is_addr_spec("\"a b\"@[192.0.2.1]"));
        for text in [
            "",
            "a",
            " a@acme.example",
            "a@acme.example ",
            "a@b (c)",
            "a@b.",
            "<a@b>",
        ] {
            assert!(!is_addr_spec(text), "{text}");
        }
    }

    proptest::proptest! {
        /// Each address read is a bare `addr-spec`; a value that is no address list is never
        /// one itself (so showing it as written never passes for an address).
        #[test]
        fn read_gives_addr_specs_and_refuses_lone_ones_never(
            value in r#"[ a-c@.,:;<>()"\\\[\]\t]{0,24}"#
        ) {
            match read(&value) {
                Some(addresses) => proptest::prop_assert!(addresses.iter().all(|a| is_addr_spec(a))),
                None => proptest::prop_assert!(!is_addr_spec(value.trim())),
            }
        }
    }
}
