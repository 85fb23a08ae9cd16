//! What upstream's EHLO reply offers, of what we use: a keyword per line after the first,
//! case-insensitive, its parameters after it (RFC 5321 4.1.1.1).

use super::Reply;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Extensions {
    pub pipelining: bool,
    pub starttls: bool,
    pub eight_bit_mime: bool,
    pub smtputf8: bool,
    pub auth_plain: bool,
    pub auth_login: bool,
    pub auth_xoauth2: bool,
}

impl Extensions {
    pub fn of(ehlo: &Reply) -> Extensions {
        let mut offered = Extensions::default();
        for line in ehlo.lines().skip(1) {
            let mut words = line.split_ascii_whitespace();
            let Some(keyword) = words.next() else {
                continue;
            };
            let is = |name: &str| keyword.eq_ignore_ascii_case(name);
            if is("PIPELINING") {
                offered.pipelining = true;
            } else if is("STARTTLS") {
                offered.starttls = true;
            } else if is("8BITMIME") {
                offered.eight_bit_mime = true;
            } else if is("SMTPUTF8") {
                offered.smtputf8 = true;
            } else if is("AUTH") {
                for mechanism in words {
                    offered.auth_plain |= mechanism.eq_ignore_ascii_case("PLAIN");
                    offered.auth_login |= mechanism.eq_ignore_ascii_case("LOGIN");
                    offered.auth_xoauth2 |= mechanism.eq_ignore_ascii_case("XOAUTH2");
                }
            }
        }
        offered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(lines: &[&str]) -> Extensions {
        Extensions::of(&Reply {
            code: 250,
            text: lines.join("\n"),
        })
    }

    #[test]
    fn keywords_are_read_after_the_greeting_line_in_any_case() {
        let all = of(&[
            "mx.test Hello PIPELINING",
            "pipelining",
            "STARTTLS",
            "8BITMIME",
            "SmtpUtf8",
            "AUTH LOGIN plain CRAM-MD5 xoauth2",
        ]);
        assert_eq!(
            all,
            Extensions {
                pipelining: true,
                starttls: true,
                eight_bit_mime: true,
                smtputf8: true,
                auth_plain: true,
                auth_login: true,
                auth_xoauth2: true,
            }
        );
        let none = of(&[
            "mx.test PIPELINING STARTTLS",
            "SIZE 100",
            "AUTH CRAM-MD5",
            "",
            "XPIPELINING",
        ]);
        assert_eq!(
            none,
            Extensions::default(),
            "the first line is the server's name"
        );
    }
}
