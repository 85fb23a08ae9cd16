//! The `Received:` trace header a relay must add (RFC 5321 4.4). It is the only change made
//! to a message's bytes, besides removing a key header the config asks to strip.

use std::net::IpAddr;
use std::time::SystemTime;

/// What the header records about the hop.
pub struct Trace<'a> {
    pub helo: &'a str,
    pub peer: IpAddr,
    pub hostname: &'a str,
    /// `ESMTP`, `SMTP`, or with `S` (TLS) / `A` (AUTH) as in RFC 3848.
    pub protocol: &'a str,
    pub id: &'a str,
    /// The single recipient, named only when there is exactly one (RFC 5321 4.4 warns that
    /// listing several leaks Bcc recipients).
    pub for_rcpt: Option<&'a str>,
}

/// The `with` protocol of RFC 3848: `SMTP` for HELO, `ESMTP` for EHLO, plus `S` under TLS and
/// `A` after AUTH (either implies an extended session).
pub fn protocol(esmtp: bool, tls: bool, auth: bool) -> &'static str {
    match (esmtp || tls || auth, tls, auth) {
        (false, _, _) => "SMTP",
        (true, false, false) => "ESMTP",
        (true, true, false) => "ESMTPS",
        (true, false, true) => "ESMTPA",
        (true, true, true) => "ESMTPSA",
    }
}

/// The header, folded over lines of at most 78 characters, ending in CRLF.
pub fn header(trace: &Trace<'_>, now: SystemTime) -> Vec<u8> {
    let helo: String = trace
        .helo
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(255)
        .collect();
    let helo = if helo.is_empty() { "unknown" } else { &helo };
    let date = httpdate::fmt_http_date(now).replace(" GMT", " +0000");
    let mut h = format!(
        "Received: from {helo} ([{peer}])\r\n\tby {host} (mailsluice) with {proto} id {id}",
        peer = trace.peer,
        host = trace.hostname,
        proto = trace.protocol,
        id = trace.id,
    );
    if let Some(rcpt) = trace
        .for_rcpt
        .filter(|r| r.len() < 200 && !r.contains(['\r', '\n']))
    {
        h.push_str(&format!("\r\n\tfor <{rcpt}>"));
    }
    h.push_str(&format!(";\r\n\t{date}\r\n"));
    h.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_the_hop_and_ends_in_crlf() {
        let t = Trace {
            helo: "client.example",
            peer: "127.0.0.1".parse().unwrap(),
            hostname: "relay.example",
            protocol: "ESMTP",
            id: "abc",
            for_rcpt: Some("a@b.example"),
        };
        let h = String::from_utf8(header(&t, SystemTime::UNIX_EPOCH)).unwrap();
        assert!(h.starts_with("Received: from client.example ([127.0.0.1])\r\n\tby relay.example"));
        assert!(h.contains("for <a@b.example>;"));
        assert!(h.ends_with("Thu, 01 Jan 1970 00:00:00 +0000\r\n"), "{h}");
        assert!(h.lines().all(|l| l.len() <= 78));
    }

    #[test]
    fn hostile_helo_cannot_inject_a_header() {
        let t = Trace {
            helo: "x\r\nBcc: victim@example",
            peer: "127.0.0.1".parse().unwrap(),
            hostname: "r",
            protocol: "SMTP",
            id: "i",
            for_rcpt: None,
        };
        let h = String::from_utf8(header(&t, SystemTime::UNIX_EPOCH)).unwrap();
        assert_eq!(h.matches("\r\n").count(), 3);
        assert!(!h.contains("\r\nBcc"));
    }
}
