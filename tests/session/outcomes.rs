//! Every reply docs/replies.md lists that a message can get (at MAIL, at DATA, or at its
//! final dot), made through SMTP, with what the relay records of it: the outcome of its one
//! `message` log line and of `mailsluice_messages_total{outcome}`, and whether a layer is
//! named (the line's `layer`, and `mailsluice_throttled_total{layer}`). Every row of the
//! docs' "The final dot" and "From the upstream leg" sections is in [`CASES`], or in
//! [`NOT_HERE`] with why.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use mailsluice::upstream::{Accepted, Feedback, ForwardFuture, Forwarder, Outgoing, UpstreamError};

use crate::support::auth::{auth_config, plain};
use crate::support::relay::{config_text, Client, Relay};
use crate::support::replies::{docs, pattern, section, REPLIES};
use crate::support::throttle::Events;
use crate::support::upstream::refusing_addr;
use crate::support::wait::until;

/// How upstream (a scripted forwarder) answers one message.
#[derive(Clone)]
enum Up {
    /// `250 Ok ses-<n>`.
    Take,
    /// `250`, refused after its end for some recipients (direct delivery to several domains).
    Partial,
    Fail(UpstreamError),
    /// Never answers.
    Stall,
}

/// Answers each message as its script says (then as `then`), keeping what it was given.
struct Scripted {
    script: Mutex<VecDeque<Up>>,
    then: Up,
    got: Mutex<Vec<Vec<u8>>>,
}

impl Scripted {
    fn new(script: Vec<Up>, then: Up) -> Arc<Scripted> {
        Arc::new(Scripted {
            script: Mutex::new(script.into()),
            then,
            got: Mutex::default(),
        })
    }
}

impl Forwarder for Scripted {
    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        let up = (self.script.lock().unwrap().pop_front()).unwrap_or_else(|| self.then.clone());
        let n = {
            let mut got = self.got.lock().unwrap();
            got.push(outgoing.pieces.concat());
            got.len() - 1
        };
        Box::pin(async move {
            match up {
                Up::Take => Ok(Accepted::new(format!("Ok ses-{n}"))),
                Up::Partial => Ok(Accepted {
                    text: "2.0.0 Ok (refused for 1 of 2 recipients; the sender is sent a report)"
                        .into(),
                    partial: true,
                    bounced: Vec::new(),
                }),
                Up::Fail(e) => Err(e),
                Up::Stall => std::future::pending().await,
            }
        })
    }
}

/// How a case makes its reply.
#[derive(Clone, Copy, Debug)]
enum How {
    /// Its message, upstream answering as `Case::up` says.
    Send,
    /// A message whose data is refused (see [`body_of`]).
    Data(Body),
    /// One message delivered first; the case's message then (a layer's bucket is empty).
    AfterOne,
    /// A message forwarded once, then sent again as upstream got it (our mark in it).
    ComesBack,
    /// One message delivered first; the case's message then waits, and the relay stops.
    WaitingAtShutdown,
    /// The relay stops while upstream has the message (it never answers).
    WithUpstreamAtShutdown,
    /// Tenant acme's first message bounces (an SES event); its next message, at the dot.
    AfterBounceAtDot,
    /// As `AfterBounceAtDot`, the tenant known at MAIL (the sender's domain).
    AfterBounceAtMail,
    /// `gone@example.net` bounced (suppressed); a message to it alone.
    ToSuppressed,
    /// A transaction whose only RCPT was refused (`RCPT TO:<>`).
    NoRecipient,
    /// AUTH as user `acme`, whose `senders` are `@acme.example`; a message with these
    /// `From:` lines.
    FromField(&'static str),
}

#[derive(Clone, Copy, Debug)]
enum Body {
    BareLf,
    Nul,
    Continuation,
    LongLine,
    Big,
    ManyHops,
}

/// One reply of docs/replies.md and what it is counted as.
struct Case {
    /// The reply as docs/replies.md writes it (`{...}` and `...` stand for what varies).
    reply: &'static str,
    how: How,
    outcome: &'static str,
    /// The `message` line names a layer.
    layer_in_log: bool,
    /// `mailsluice_throttled_total{layer}` counts it.
    layer_in_metric: bool,
}

const fn case(
    reply: &'static str,
    how: How,
    outcome: &'static str,
    log: bool,
    metric: bool,
) -> Case {
    Case {
        reply,
        how,
        outcome,
        layer_in_log: log,
        layer_in_metric: metric,
    }
}

/// The table: reply, how it is made, outcome, layer named in the log line, in the metric.
const CASES: [Case; 41] = [
    case("250 ...", How::Send, "delivered", false, false),
    case("250 ... (refused for {n} of {m} recipients; the sender is sent a report)", How::Send, "partial", false, false),
    case("550 5.6.0 Message contains a bare CR or LF (RFC 5321 2.3.8); not relayed", How::Data(Body::BareLf), "content_rejected", false, false),
    case("550 5.6.0 Message contains a NUL byte (RFC 5322 forbids it); not relayed", How::Data(Body::Nul), "content_rejected", false, false),
    case("550 5.6.0 Message starts with a continuation line (space or tab); not relayed", How::Data(Body::Continuation), "content_rejected", false, false),
    case("500 5.5.2 Line too long (at most {n} bytes)", How::Data(Body::LongLine), "content_rejected", false, false),
    case("552 5.3.4 Message size exceeds fixed limit of {n} bytes", How::Data(Body::Big), "too_big", false, false),
    case("452 4.3.1 Insufficient system storage, try again later", How::Data(Body::Big), "insufficient_storage", false, false),
    case("554 5.4.6 Too many hops (mail loop?)", How::Data(Body::ManyHops), "loop", false, false),
    case("554 5.4.6 Mail loop: the message already went through this relay", How::ComesBack, "loop", false, false),
    case("451 4.7.1 Rate limit of layer {layer} reached, retry after {s.mmm} s", How::AfterOne, "throttled", true, true),
    case("554 5.5.3 Message costs {n} tokens but layer {layer} holds at most {b}; it can never pass: send it with fewer recipients", How::Send, "cost_over_burst", true, false),
    case("451 4.4.3 Rate-limit store unavailable, try again later", How::Send, "store_unavailable", false, false),
    case("451 4.3.5 No route for this message", How::Send, "no_route", false, false),
    case("421 4.3.2 Service shutting down, try again later", How::WaitingAtShutdown, "shutdown", false, false),
    case("421 4.3.2 Service shutting down before upstream answered; the message may have been delivered", How::WithUpstreamAtShutdown, "shutdown", false, false),
    case("451 4.7.1 Tenant {key} paused: {kind} rate {r} % of {n} messages over {window} (limit {l} %)", How::AfterBounceAtDot, "reputation_paused", false, false),
    case("451 4.7.1 Tenant {key} paused: {kind} rate {r} % of {n} messages over {window} (limit {l} %)", How::AfterBounceAtMail, "reputation_paused", false, false),
    case("550 5.7.1 Tenant {key} paused: {kind} rate {r} % of {n} messages over {window} (limit {l} %)", How::AfterBounceAtDot, "reputation_paused", false, false),
    case("554 5.5.1 No valid recipients", How::ToSuppressed, "suppressed", false, false),
    case("554 5.5.1 No valid recipients", How::NoRecipient, "no_recipients", false, false),
    case("451 4.4.1 Upstream unavailable, try again later", How::Send, "upstream_unavailable", false, false),
    case("451 4.4.1 No answer from upstream after the message was sent; it may have been delivered", How::Send, "upstream_uncertain", false, false),
    case("451 4.7.0 Upstream refused the relay's credentials", How::Send, "upstream_credentials", false, false),
    case("451 4.7.0 The relay has no credentials for upstream", How::Send, "upstream_credentials", false, false),
    case("451 4.7.1 Upstream rate limit reached, retry after {s.mmm} s", How::Send, "upstream_throttled", false, false),
    case("451 4.7.1 Upstream sending quota exhausted, retry after {s.mmm} s", How::Send, "upstream_paused", false, false),
    case("451 4.7.1 upstream: SES tenant {name} paused ({why}), retry after {s.mmm} s", How::Send, "upstream_tenant_paused", false, false),
    case("552 5.3.4 upstream: Message too big for SES ({n} bytes, at most 41943040)", How::Send, "upstream_perm_fail", false, false),
    case("{code} {esc} upstream: {upstream's text}", How::Send, "upstream_temp_fail", false, false),
    case("550 5.7.1 From: <{address}> not allowed for user {user}", How::FromField("From: ceo@globex.example\r\n"), "sender_refused", false, false),
    case("451 4.7.1 upstream: SES tenant {name} disabled at SES", How::Send, "upstream_tenant_paused", false, false),
    case("554 5.3.5 upstream: SES NotFoundException: {SES's text}", How::Send, "upstream_perm_fail", false, false),
    case("250 2.0.0 Ok: queued as {id} (held for later delivery)", How::AfterOne, "held", true, false),
    case("452 4.3.1 Insufficient system storage, try again later", How::AfterOne, "spool_full", true, false),
    case("550 5.7.1 From: unreadable address for user {user}", How::FromField("From: ceo@globex.example (@acme.example\r\n"), "sender_refused", false, false),
    case("550 5.7.1 From: missing", How::FromField(""), "sender_refused", false, false),
    case("451 4.3.5 SES tenant name {name} is not one SES takes (A-Z a-z 0-9 _ -, at most 64)", How::Send, "upstream_tenant_unfit", false, false),
    case("451 4.3.5 upstream: SES tenant {name} unknown to SES", How::Send, "upstream_temp_fail", false, false),
    case("550 5.7.1 upstream: {domain} is not a sending identity of SES tenant {name}", How::Send, "upstream_perm_fail", false, false),
    case("550 5.7.1 upstream: <{sender}> is not a mailbox this relay may send as", How::Send, "upstream_perm_fail", false, false),
];

/// Rows of those sections no message of a session can get here, and why.
const NOT_HERE: [(&str, &str); 1] = [(
    "554 5.6.0 message has a bare CR or LF next to a dot; not relayed (SMTP smuggling)",
    "the SMTP upstream's own guard: the session refuses such a message first (550 5.6.0); \
     tests/upstream/smtp.rs matches the guard's reply to this row by its full text",
)];

const LAYER: &str = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 1\n\
                     interval_ms = 3600000\n";
const MESSAGE: &str = "X-Tenant: acme\r\nSubject: s\r\n\r\nx\r\n";
const FROM: &str = "app@acme.example";
const TO: &str = "b@example.net";

/// The config (`[smtp]` keys, then tables) and upstream's answers for case `i`.
fn setup(i: usize) -> (String, String, Vec<Up>, Up) {
    let take = (String::new(), String::new(), vec![], Up::Take);
    let fail = |e: UpstreamError| (String::new(), String::new(), vec![], Up::Fail(e));
    let refused = |code: u16, esc: &str, text: &str| UpstreamError::Rejected {
        code,
        enhanced: Some(esc.into()),
        text: text.into(),
    };
    let pushback = |feedback, text: &str| UpstreamError::Pushback {
        feedback,
        code: 454,
        enhanced: Some("4.7.0".into()),
        text: text.into(),
    };
    let reputation = |extra: &str| {
        format!(
            "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\nmin_bounces = 1\n{extra}"
        )
    };
    match i {
        0 | 2..=4 => take,
        1 => (String::new(), String::new(), vec![Up::Partial], Up::Take),
        5 => (
            "max_line_bytes = 100".into(),
            String::new(),
            vec![],
            Up::Take,
        ),
        6 => (
            "max_message_bytes = 1000".into(),
            String::new(),
            vec![],
            Up::Take,
        ),
        7 => (
            "max_buffered_bytes = 500".into(),
            String::new(),
            vec![],
            Up::Take,
        ),
        8 => ("max_received = 2".into(), String::new(), vec![], Up::Take),
        9 => take,
        10 => (
            String::new(),
            format!("{LAYER}mode = \"reject\"\n"),
            vec![],
            Up::Take,
        ),
        11 => (
            String::new(),
            format!("{LAYER}cost = \"recipients\"\n"),
            vec![],
            Up::Take,
        ),
        12 => {
            let redis = format!(
                "[[throttle]]\nname = \"shared\"\nkey = \"none\"\nlimit = 10\nstore = \"redis\"\n\
                 [redis]\nurl = \"redis://{}\"\non_error = \"reject\"\ntimeout_ms = 200\n",
                REFUSING.with(|r| r.addr())
            );
            (String::new(), redis, vec![], Up::Take)
        }
        13 => {
            let route = "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"globex\"]\n\
                         upstream = \"default\"\n";
            (String::new(), route.into(), vec![], Up::Take)
        }
        14 => (
            String::new(),
            format!("{LAYER}max_wait_ms = 7200000\n"),
            vec![],
            Up::Take,
        ),
        15 => (
            "shutdown_grace_ms = 300".into(),
            String::new(),
            vec![],
            Up::Stall,
        ),
        16 => (String::new(), reputation(""), vec![], Up::Take),
        17 => {
            let by_sender =
                "[reputation]\nkey = \"sender-domain\"\nmin_messages = 1\nmin_bounces = 1\n";
            (String::new(), by_sender.into(), vec![], Up::Take)
        }
        18 => (
            String::new(),
            reputation("action = \"reject\"\n"),
            vec![],
            Up::Take,
        ),
        // Past 100 % only: never paused, only suppressed.
        19 => (
            String::new(),
            reputation("max_bounce_rate = 1.0\n"),
            vec![],
            Up::Take,
        ),
        20 => take,
        21 => fail(UpstreamError::Unavailable("connection refused".into())),
        22 => fail(UpstreamError::Uncertain(
            "timed out after the final dot".into(),
        )),
        23 => fail(UpstreamError::Credentials("535 5.7.8 bad password".into())),
        24 => fail(UpstreamError::NoCredentials(
            "SES: no credentials found".into(),
        )),
        25 => {
            let adaptive = "[[throttle]]\nname = \"account\"\nkey = \"none\"\nlimit = 10\n\
                            adaptive = true\nmax_wait_ms = 300\n";
            let rate = pushback(
                Feedback::Rate,
                "Throttling failure: Maximum sending rate exceeded.",
            );
            (String::new(), adaptive.into(), vec![], Up::Fail(rate))
        }
        26 => fail(pushback(
            Feedback::Quota,
            "Throttling failure: Daily message quota exceeded.",
        )),
        27 => fail(UpstreamError::TenantPaused(
            "SES tenant acme paused (paused by SES), retry after 60.000 s".into(),
        )),
        28 => fail(mailsluice::upstream::ses::too_big(50_000_000)),
        29 => fail(refused(450, "4.2.0", "mailbox busy")),
        30 | 35 | 36 => {
            let users = [("acme", "s3cret", "senders = [\"@acme.example\"]")];
            let smtp = format!(
                "allow_plaintext_auth = true\n{}",
                auth_config(&users, "failure_delay_ms = 0")
            );
            (smtp, String::new(), vec![], Up::Take)
        }
        // What the SES forwarder answers while SES's aggregate status for the tenant is
        // DISABLED (tests/upstream/ses_sync.rs reads it from a stand-in for SES).
        31 => fail(UpstreamError::TenantPaused(
            "SES tenant acme disabled at SES".into(),
        )),
        // What the SES forwarder answers to SES's 404 (tests/upstream/ses.rs asks a fake SES).
        32 => fail(refused(
            554,
            "5.3.5",
            "SES NotFoundException: Configuration set <x> does not exist.",
        )),
        // A hold-mode layer: the message after the first is held, or finds the spool full.
        33 | 34 => {
            let dir = crate::support::host::scratch_path("outcomes-spool");
            let bound = if i == 34 { "max_bytes = 1\n" } else { "" };
            let hold = format!(
                "{LAYER}mode = \"hold\"\nmax_wait_ms = 0\n[spool]\ndir = \"{}\"\n\
                 min_free_bytes = 0\n{bound}",
                dir.display()
            );
            (String::new(), hold, vec![], Up::Take)
        }
        // An SES route whose tenant is the sender (`app@acme.example`): a name SES does not
        // take as it is (the upstream is `ses://` for this case, see `run`).
        37 => {
            let route = "[[route]]\nkey = \"sender\"\nupstream = \"default\"\n\
                         ses_tenant = \"{key}\"\n";
            (String::new(), route.into(), vec![], Up::Take)
        }
        // What the SES forwarder answers when SES says it does not know the message's tenant,
        // or that the sender is not associated with it (tests/upstream/ses_first_message.rs
        // asks a fake SES).
        38 => fail(refused(451, "4.3.5", "SES tenant acme unknown to SES")),
        39 => fail(refused(
            550,
            "5.7.1",
            "acme.example is not a sending identity of SES tenant acme",
        )),
        // What an XOAUTH2 upstream logging in as each sender answers for a sender outside its
        // `mailboxes` (tests/upstream/xoauth2.rs provokes it against a real login).
        40 => fail(refused(
            550,
            "5.7.1",
            "<a@acme.example> is not a mailbox this relay may send as",
        )),
        _ => unreachable!("a case of the table"),
    }
}

thread_local! {
    /// An address nothing listens on, held for the test (Redis down).
    static REFUSING: crate::support::upstream::Refusing = refusing_addr();
}

fn body_of(body: Body) -> Vec<u8> {
    let text = match body {
        Body::BareLf => "Subject: s\r\n\r\nbare\nline\r\n".to_string(),
        Body::Nul => "Subject: s\r\n\r\nnul\0byte\r\n".to_string(),
        Body::Continuation => " continued\r\nSubject: s\r\n\r\nx\r\n".to_string(),
        Body::LongLine => format!("Subject: s\r\n\r\n{}\r\n", "x".repeat(200)),
        Body::Big => format!("Subject: s\r\n\r\n{}", "0123456789abcde\r\n".repeat(200)),
        Body::ManyHops => {
            let hop = "Received: from a by b; Tue, 1 Dec 2026 10:00:00 +0000\r\n";
            format!("{}Subject: s\r\n\r\nx\r\n", hop.repeat(3))
        }
    };
    text.into_bytes()
}

/// What one case came to: the reply, and the relay's record of its message.
#[derive(Debug)]
struct Seen {
    code: u16,
    text: String,
    /// The `message` lines logged for it (fields as `name=value `).
    lines: Vec<String>,
    counted: f64,
    counted_as_outcome: f64,
    throttled: f64,
}

/// The value of `name` in a recorded event's fields (`name=value `, values with no space).
fn field<'a>(fields: &'a str, name: &str) -> &'a str {
    let at = fields
        .split(' ')
        .find_map(|f| f.strip_prefix(name).and_then(|v| v.strip_prefix('=')));
    at.unwrap_or_else(|| panic!("no {name} in {fields}"))
}

async fn run(i: usize, case: &Case) -> Seen {
    let (smtp, rest, script, then) = setup(i);
    let fwd = Scripted::new(script, then);
    let url = if i == 37 {
        "ses://eu-west-1"
    } else {
        "file://unused"
    };
    let relay = Relay::start(&config_text(url, &smtp, &rest), fwd.clone()).await;
    let (events, _capture) = Events::capture();
    let message = MESSAGE.as_bytes();
    let mut c = relay.client().await;
    match case.how {
        How::AfterOne | How::WaitingAtShutdown => {
            assert_eq!(c.send_mail(FROM, &[TO], message).await.0, 250);
        }
        How::ComesBack => {
            assert_eq!(c.send_mail(FROM, &[TO], message).await.0, 250);
        }
        How::AfterBounceAtDot | How::AfterBounceAtMail | How::ToSuppressed => {
            let gone = "gone@example.net";
            assert_eq!(c.send_mail(FROM, &[gone], message).await.0, 250);
            let bounce = crate::support::ses_events::bounce("ses-0", "f-0", gone);
            relay
                .reputation()
                .unwrap()
                .apply_text(&bounce)
                .await
                .unwrap();
        }
        _ => {}
    }
    let outcome = format!("mailsluice_messages_total{{outcome=\"{}\"}}", case.outcome);
    let before = (
        relay.metric("mailsluice_messages_total"),
        relay.metric(&outcome),
        relay.metric("mailsluice_throttled_total"),
        events.named("message").len(),
    );
    let (code, text) = match case.how {
        How::Send | How::AfterOne | How::AfterBounceAtDot => {
            let rcpts: &[&str] = match i {
                11 => &[TO, "c@example.net"],
                _ => &[TO],
            };
            c.send_mail(FROM, rcpts, message).await
        }
        How::AfterBounceAtMail => {
            c.cmd("EHLO client.test").await;
            c.cmd(&format!("MAIL FROM:<{FROM}>")).await
        }
        How::Data(body) => c.send_mail(FROM, &[TO], &body_of(body)).await,
        How::FromField(from) => {
            c.cmd("EHLO client.test").await;
            let (code, text) = c
                .cmd(&format!("AUTH PLAIN {}", plain("acme", "s3cret")))
                .await;
            assert_eq!(code, 235, "{text}");
            let message = format!("{from}Subject: s\r\n\r\nx\r\n");
            c.send_mail(FROM, &[TO], message.as_bytes()).await
        }
        How::ComesBack => {
            let forwarded = fwd.got.lock().unwrap()[0].clone();
            c.send_mail(FROM, &[TO], &forwarded).await
        }
        How::ToSuppressed | How::NoRecipient => {
            c.cmd("EHLO client.test").await;
            assert_eq!(c.cmd(&format!("MAIL FROM:<{FROM}>")).await.0, 250);
            let to = match case.how {
                How::ToSuppressed => "RCPT TO:<gone@example.net>",
                _ => "RCPT TO:<>",
            };
            let (code, text) = c.cmd(to).await;
            assert!(code == 550 || code == 501, "RCPT refused: {code} {text}");
            c.cmd("DATA").await
        }
        How::WaitingAtShutdown | How::WithUpstreamAtShutdown => {
            let addr = relay.addr;
            let waiter = tokio::spawn(async move {
                let mut c = Client::connect(addr).await;
                c.send_mail(FROM, &[TO], MESSAGE.as_bytes()).await
            });
            match case.how {
                How::WaitingAtShutdown => {
                    until("the message waits", async || relay.throttle.waiting(0) == 1).await
                }
                _ => {
                    until("upstream has it", async || {
                        fwd.got.lock().unwrap().len() == 1
                    })
                    .await
                }
            }
            relay.trigger_shutdown();
            waiter.await.unwrap()
        }
    };
    let lines: Vec<String> = (events.named("message").into_iter())
        .skip(before.3)
        .map(|(_, fields)| fields)
        .collect();
    Seen {
        code,
        text,
        lines,
        counted: relay.metric("mailsluice_messages_total") - before.0,
        counted_as_outcome: relay.metric(&outcome) - before.1,
        throttled: relay.metric("mailsluice_throttled_total") - before.2,
    }
}

#[tokio::test]
async fn every_reply_a_message_gets_has_one_line_with_its_own_outcome() {
    let docs = docs();
    for heading in ["## The final dot", "## From the upstream leg"] {
        for reply in section(&docs, heading) {
            let covered =
                CASES.iter().any(|c| c.reply == reply) || NOT_HERE.iter().any(|(r, _)| *r == reply);
            assert!(covered, "{REPLIES}: `{reply}` ({heading}) has no case");
        }
    }
    let mut failures = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        assert!(
            docs.contains(&format!("`{}`", case.reply)),
            "{REPLIES} lists `{}`",
            case.reply
        );
        let seen = run(i, case).await;
        let reply = format!("{} {}", seen.code, seen.text);
        let [line] = &seen.lines[..] else {
            failures.push(format!(
                "{}: {} message lines: {seen:?}",
                case.reply,
                seen.lines.len()
            ));
            continue;
        };
        let layer = field(line, "layer");
        let checks = [
            (pattern(case.reply).is_match(&reply), "the reply"),
            (field(line, "outcome") == case.outcome, "the line's outcome"),
            (layer.is_empty() != case.layer_in_log, "the line's layer"),
            (
                seen.counted == 1.0 && seen.counted_as_outcome == 1.0,
                "the outcome counted once",
            ),
            (
                (seen.throttled == 1.0) == case.layer_in_metric,
                "throttled_total{layer}",
            ),
        ];
        for (ok, what) in checks {
            if !ok {
                failures.push(format!(
                    "{} ({}): {what}: {reply} / {line} / {seen:?}",
                    case.reply, case.outcome
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
