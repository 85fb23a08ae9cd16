//! Every reply of docs/replies.md's sections on the session ("Connection and session", "TLS
//! and AUTH", "Envelope (MAIL, RCPT)") provoked through SMTP and matched against its row's
//! full text (its placeholders as wildcards). A reply a message gets at its final dot is
//! `outcomes.rs`'s, with what the relay records of it; a row of these sections it provokes is
//! matched there and named in [`IN_OUTCOMES`]. A new row needs one new case in [`CASES`]: a row
//! with none fails, quoting it.

use crate::support::auth::auth_config;
use crate::support::memory::MemoryForwarder;
use crate::support::relay::{config_text, Client, Relay};
use crate::support::replies::{docs, matches, section, REPLIES};
use crate::support::tls::TestCert;

const SECTIONS: [&str; 3] = [
    "## Connection and session",
    "## TLS and AUTH",
    "## Envelope (MAIL, RCPT)",
];

/// What the client does; the last reply it reads is the case's.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// A command line, and its reply.
    Cmd(&'static str),
    /// A reply read without sending anything (the relay speaks first: a timeout, a close).
    Read,
    /// Another connection from the same address, its first reply read; the steps after
    /// are on it (the first stays open).
    Connect,
    /// The relay begins its shutdown (SIGTERM).
    Shutdown,
    /// `gone@example.net` hard-bounces (a message to it, then SES's event).
    Bounce,
}

/// One reply of the docs and how to provoke it.
struct Case {
    reply: &'static str,
    /// `[smtp]` keys; `{auth}` stands for user `acme` (password `s3cret`, `senders =
    /// ["@acme.example"]`) with `failure_delay_ms = 0`, `{tls}` for `[smtp.tls]`.
    smtp: &'static str,
    /// Tables after `[upstream]`.
    rest: &'static str,
    steps: &'static [Step],
}

const fn case(
    reply: &'static str,
    smtp: &'static str,
    rest: &'static str,
    steps: &'static [Step],
) -> Case {
    Case {
        reply,
        smtp,
        rest,
        steps,
    }
}

use Step::{Bounce, Cmd, Connect, Read, Shutdown};

const EHLO: Step = Cmd("EHLO client.test");
const MAIL: Step = Cmd("MAIL FROM:<app@acme.example>");
const RCPT: Step = Cmd("RCPT TO:<b@example.net>");
const REPUTATION: &str = "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\n\
                          min_bounces = 1\nmax_bounce_rate = 1.0\n";

/// The table: reply, `[smtp]` keys, tables after `[upstream]`, what the client does.
const CASES: &[Case] = &[
    // Connection and session
    case("220 {hostname} ESMTP mailsluice", "", "", &[]),
    case("421 4.3.2 Too many connections, try again later", "max_connections = 1", "", &[Connect]),
    case("421 4.7.0 Too many connections from your address, try again later", "max_connections_per_ip = 1", "", &[Connect]),
    case("421 4.4.2 Idle for too long, closing connection", "idle_timeout_ms = 100", "", &[Read]),
    case("421 4.4.2 DATA took too long, closing connection", "data_timeout_ms = 100", "", &[EHLO, MAIL, RCPT, Cmd("DATA"), Read]),
    case("421 4.7.0 Too many errors, closing connection", "max_errors = 1", "", &[Cmd("FOO"), Read]),
    case("421 4.7.0 Too many commands without a message, closing connection", "max_junk_commands = 1", "", &[Cmd("NOOP"), Cmd("NOOP")]),
    case("421 4.7.0 BDAT chunk not read, closing connection (use DATA)", "", "", &[EHLO, Cmd("BDAT 5 LAST"), Read]),
    case("421 4.3.2 Service shutting down, try again later", "", "", &[EHLO, Shutdown, Read]),
    case("500 5.5.2 Command not recognized", "", "", &[Cmd("FOO")]),
    case("500 5.5.2 Line too long (at most {n} bytes)", "max_line_bytes = 100", "", &[Cmd(concat!("NOOP ", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"))]),
    case("501 5.5.4 Syntax error: {detail}", "", "", &[EHLO, Cmd("MAIL FROM")]),
    case("502 5.5.1 {verb} not implemented", "", "", &[Cmd("EXPN staff")]),
    case("503 5.5.1 {detail}", "", "", &[EHLO, RCPT]),
    case("214 2.0.0 mailsluice relays mail: ...", "", "", &[Cmd("HELP")]),
    case("252 2.5.0 Cannot VRFY user, ...", "", "", &[Cmd("VRFY someone")]),
    case("221 2.0.0 Bye", "", "", &[Cmd("QUIT")]),
    // TLS and AUTH
    case("220 2.0.0 Ready to start TLS", "{tls}", "", &[EHLO, Cmd("STARTTLS")]),
    case("530 5.7.0 Authentication required", "trusted_networks = [\"10.0.0.0/8\"]\n{auth}", "", &[EHLO, MAIL]),
    case("538 5.7.11 Encryption required for requested authentication mechanism", "{auth}", "", &[EHLO, Cmd("AUTH PLAIN AGFjbWUAczNjcmV0")]),
    case("504 5.5.4 Unrecognized authentication type", "allow_plaintext_auth = true\n{auth}", "", &[EHLO, Cmd("AUTH CRAM-MD5")]),
    case("501 5.0.0 Authentication cancelled", "allow_plaintext_auth = true\n{auth}", "", &[EHLO, Cmd("AUTH LOGIN"), Cmd("*")]),
    case("235 2.7.0 Authentication successful", "allow_plaintext_auth = true\n{auth}", "", &[EHLO, Cmd("AUTH PLAIN AGFjbWUAczNjcmV0")]),
    case("535 5.7.8 Authentication credentials invalid", "allow_plaintext_auth = true\n{auth}", "", &[EHLO, Cmd("AUTH PLAIN AGFjbWUAd3Jvbmc=")]),
    case("421 4.7.0 Too many failed authentication attempts, try again later", "allow_plaintext_auth = true\n{auth}max_failures = 2\n", "", &[EHLO, Cmd("AUTH PLAIN AGFjbWUAd3Jvbmc="), Cmd("AUTH PLAIN AGFjbWUAd3Jvbmc=")]),
    // Envelope (MAIL, RCPT)
    case("250 2.1.0 Sender ok", "", "", &[EHLO, MAIL]),
    case("250 2.1.5 Recipient ok", "", "", &[EHLO, MAIL, RCPT]),
    case("501 5.1.7 Bad sender address syntax", "", "", &[EHLO, Cmd("MAIL FROM:<postmaster>")]),
    case("501 5.1.3 Bad recipient address syntax", "", "", &[EHLO, MAIL, Cmd("RCPT TO:<nobody>")]),
    case("501 5.1.3 Empty recipient address", "", "", &[EHLO, MAIL, Cmd("RCPT TO:<>")]),
    case("550 5.1.1 <{addr}> suppressed: {reason} on {date}", "", REPUTATION, &[Bounce, EHLO, MAIL, Cmd("RCPT TO:<gone@example.net>")]),
    case("553 5.1.7 Address with < or > inside quotes is not relayed", "", "", &[EHLO, Cmd("MAIL FROM:<\"a>b\"@acme.example>")]),
    case("553 5.1.3 Address with < or > inside quotes is not relayed", "", "", &[EHLO, MAIL, Cmd("RCPT TO:<\"a<b\"@example.net>")]),
    case("501 5.5.4 Invalid value for parameter {name}", "", "", &[EHLO, Cmd("MAIL FROM:<app@acme.example> SIZE=abc")]),
    case("555 5.5.4 Unsupported parameter {name}", "", "", &[EHLO, Cmd("MAIL FROM:<app@acme.example> RET=FULL")]),
    case("552 5.3.4 Message size exceeds fixed limit of {n} bytes", "max_message_bytes = 1000", "", &[EHLO, Cmd("MAIL FROM:<app@acme.example> SIZE=5000")]),
    case("452 4.5.3 Too many recipients (at most {n} per message)", "max_recipients = 1", "", &[EHLO, MAIL, RCPT, Cmd("RCPT TO:<c@example.net>")]),
    case("553 5.7.1 <{address}>: sender not allowed for user {user}", "allow_plaintext_auth = true\n{auth}", "", &[EHLO, Cmd("AUTH PLAIN AGFjbWUAczNjcmV0"), Cmd("MAIL FROM:<ceo@globex.example>")]),
];

/// Rows of these sections a message gets at its final dot: `outcomes.rs` provokes each and
/// matches its full text.
const IN_OUTCOMES: &[&str] = &[
    "421 4.3.2 Service shutting down before upstream answered; the message may have been delivered",
    "554 5.5.1 No valid recipients",
];

/// Rows of SES tenants' identities, which need SES (a stand-in): matched by full text in
/// tests/upstream/ses_tenants.rs.
const WITH_SES: &[&str] = &[
    "550 5.7.1 {domain} is not a sending identity of SES tenant {name}",
    "451 4.3.5 SES tenant {name} unknown to SES",
];

/// The relay of `case`: its config with `{auth}` and `{tls}` written out.
async fn relay(case: &Case, cert: &TestCert) -> Relay {
    let users = [("acme", "s3cret", "senders = [\"@acme.example\"]")];
    let smtp = (case.smtp)
        .replace("{auth}", &auth_config(&users, "failure_delay_ms = 0"))
        .replace("{tls}", &cert.config(""));
    let config = config_text("file://unused", &smtp, case.rest);
    Relay::start(&config, MemoryForwarder::new()).await
}

/// Runs `case`'s steps; the last reply read.
async fn run(case: &Case) -> (u16, String) {
    let cert = TestCert::new();
    let relay = relay(case, &cert).await;
    let mut open = Vec::new();
    let mut c = Client::connect_raw(relay.addr).await;
    let mut last = c.reply().await;
    for step in case.steps {
        last = match *step {
            Cmd(line) => c.cmd(line).await,
            Read => c.reply().await,
            Connect => {
                open.push(std::mem::replace(
                    &mut c,
                    Client::connect_raw(relay.addr).await,
                ));
                c.reply().await
            }
            Shutdown => {
                relay.trigger_shutdown();
                (0, String::new())
            }
            Bounce => {
                let mut other = relay.client().await;
                let message = b"X-Tenant: acme\r\nSubject: s\r\n\r\nx\r\n";
                let sent = other.send_mail("app@acme.example", &["gone@example.net"], message);
                assert_eq!(sent.await.0, 250);
                let bounce = crate::support::ses_events::bounce("ses-0", "f-0", "gone@example.net");
                let guard = relay.reputation().expect("[reputation]");
                guard.apply_text(&bounce).await.unwrap();
                (0, String::new())
            }
        };
    }
    drop(open);
    last
}

#[tokio::test]
async fn every_reply_of_the_session_matches_its_row_of_the_docs() {
    let docs = docs();
    let mut rows = 0;
    for heading in SECTIONS {
        for reply in section(&docs, heading) {
            rows += 1;
            let known = |list: &[&str]| list.contains(&reply.as_str());
            let covered =
                CASES.iter().any(|c| c.reply == reply) || known(IN_OUTCOMES) || known(WITH_SES);
            assert!(covered, "{REPLIES} ({heading}): `{reply}` has no case");
        }
    }
    assert!(rows >= CASES.len(), "{rows} rows");
    let mut failures = Vec::new();
    for case in CASES {
        assert!(
            docs.contains(&format!("`{}`", case.reply)),
            "{REPLIES} lists `{}`",
            case.reply
        );
        let (code, text) = run(case).await;
        if !matches(case.reply, code, &text) {
            failures.push(format!("`{}`: sent `{code} {text}`", case.reply));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
