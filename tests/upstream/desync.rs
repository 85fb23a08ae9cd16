//! An upstream out of step: extra reply lines after the final dot's reply, replies sent before
//! their command (early), and replies of the wrong kind (`354` to the final dot, `250` to
//! DATA), with and without PIPELINING. Each message is answered for what upstream did with
//! it, and a connection whose replies can no longer be matched to its commands is never used
//! for the next message. Also: upstream's control characters never reach the client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::support::relay::{smtp_relay, Client, Relay};

/// What the scripted upstream answers transaction `n` (its `n`th MAIL, from 0, counted over
/// the server): its MAIL, its RCPT, its DATA and its final dot, each as the exact bytes to
/// write; and `later`, bytes written after the final dot's reply once the test says so
/// (`Scripted::send_later`), while the relay holds the connection between messages.
#[derive(Clone)]
struct Answers {
    mail: Vec<u8>,
    rcpt: Vec<u8>,
    data: Vec<u8>,
    dot: Vec<u8>,
    later: Vec<u8>,
}

impl Default for Answers {
    fn default() -> Answers {
        Answers {
            mail: b"250 2.1.0 ok\r\n".to_vec(),
            rcpt: b"250 2.1.5 ok\r\n".to_vec(),
            data: b"354 go on\r\n".to_vec(),
            dot: b"250 2.0.0 taken\r\n".to_vec(),
            later: Vec::new(),
        }
    }
}

type Script = Arc<dyn Fn(usize) -> Answers + Send + Sync>;

/// An SMTP server that answers as its script says, and keeps each body it read whole (with
/// the number of the connection it came on).
struct Scripted {
    addr: std::net::SocketAddr,
    bodies: Arc<Mutex<Vec<(usize, String)>>>,
    later: Arc<Later>,
}

/// The test's word to write a transaction's `later` bytes, and the server's that it did.
#[derive(Default)]
struct Later {
    go: Notify,
    written: Notify,
}

/// What every session of one scripted server shares.
#[derive(Clone)]
struct Shared {
    pipelining: bool,
    script: Script,
    mails: Arc<AtomicUsize>,
    bodies: Arc<Mutex<Vec<(usize, String)>>>,
    later: Arc<Later>,
}

impl Scripted {
    async fn serve(pipelining: bool, script: Script) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Shared {
            pipelining,
            script,
            mails: Arc::new(AtomicUsize::new(0)),
            bodies: Arc::new(Mutex::new(Vec::new())),
            later: Arc::new(Later::default()),
        };
        let (bodies, later) = (shared.bodies.clone(), shared.later.clone());
        tokio::spawn(async move {
            for conn in 0.. {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(session(stream, conn, shared.clone()));
            }
        });
        Scripted {
            addr,
            bodies,
            later,
        }
    }

    /// Has the server write the `later` bytes of the transaction waiting to send them;
    /// returns once they are written.
    async fn send_later(&self) {
        self.later.go.notify_one();
        self.later.written.notified().await;
    }

    fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    /// The bodies taken whole, with their connection's number.
    fn bodies(&self) -> Vec<(usize, String)> {
        self.bodies.lock().unwrap().clone()
    }
}

async fn session(stream: TcpStream, conn: usize, shared: Shared) {
    let mut stream = BufReader::new(stream);
    let write = async |stream: &mut BufReader<TcpStream>, bytes: &[u8]| {
        stream.get_mut().write_all(bytes).await.is_ok()
    };
    if !write(&mut stream, b"220 scripted ESMTP\r\n").await {
        return;
    }
    let mut line = String::new();
    let mut answers = Answers::default();
    loop {
        line.clear();
        if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
        if verb == "MAIL" {
            answers = (shared.script)(shared.mails.fetch_add(1, Ordering::SeqCst));
        }
        let answer: Vec<u8> = match verb.as_str() {
            "EHLO" if shared.pipelining => {
                b"250-scripted\r\n250-PIPELINING\r\n250 8BITMIME\r\n".to_vec()
            }
            "EHLO" => b"250-scripted\r\n250 8BITMIME\r\n".to_vec(),
            "MAIL" => answers.mail.clone(),
            "RCPT" => answers.rcpt.clone(),
            "DATA" => {
                let data = answers.data.clone();
                if !write(&mut stream, &data).await {
                    return;
                }
                if !data.starts_with(b"354") {
                    continue;
                }
                let mut body = String::new();
                while !body.ends_with("\r\n.\r\n") {
                    if stream.read_line(&mut body).await.unwrap_or(0) == 0 {
                        return;
                    }
                }
                shared.bodies.lock().unwrap().push((conn, body));
                answers.dot.clone()
            }
            "QUIT" => {
                let _ = write(&mut stream, b"221 bye\r\n").await;
                return;
            }
            _ => b"250 ok\r\n".to_vec(),
        };
        if !write(&mut stream, &answer).await {
            return;
        }
        if verb == "DATA" && !answers.later.is_empty() {
            shared.later.go.notified().await;
            // Sent at once, not held back (Nagle) until the relay acknowledges the reply.
            let _ = stream.get_ref().set_nodelay(true);
            if !write(&mut stream, &answers.later).await {
                return;
            }
            shared.later.written.notify_one();
        }
    }
}

/// A relay in front of `up`, and a client of it.
async fn relay(up: &Scripted) -> (Relay, Client) {
    let relay = smtp_relay(&up.url(), "", "").await;
    let client = relay.client().await;
    (relay, client)
}

/// One message with `subject`; the relay's reply.
async fn send(c: &mut Client, subject: &str) -> (u16, String) {
    let message = format!("Subject: {subject}\r\n\r\nbody\r\n");
    c.send_mail("a@example.com", &["b@example.net"], message.as_bytes())
        .await
}

/// The scripts below, each with and without PIPELINING.
fn both(script: impl Fn(usize) -> Answers + Send + Sync + 'static) -> [(bool, Script); 2] {
    let script: Script = Arc::new(script);
    [(true, script.clone()), (false, script)]
}

/// The first message is taken, and upstream sends one line more after its reply; the second
/// is refused. Read in step, each gets its own answer: the extra line is never taken as the
/// second message's reply (which made it get the first's `250`, and a third the second's
/// `554`).
#[tokio::test]
async fn an_extra_line_after_the_final_reply_is_never_the_next_messages_reply() {
    for (pipelining, script) in both(|n| match n {
        0 => Answers {
            dot: b"250 2.0.0 first taken\r\n250 2.0.0 extra\r\n".to_vec(),
            ..Answers::default()
        },
        1 => Answers {
            dot: b"554 5.7.1 second refused\r\n".to_vec(),
            ..Answers::default()
        },
        _ => Answers::default(),
    }) {
        let up = Scripted::serve(pipelining, script).await;
        let (relay, mut c) = relay(&up).await;
        let (code, text) = send(&mut c, "one").await;
        assert_eq!((code, text.as_str()), (250, "2.0.0 first taken"));
        let (code, text) = send(&mut c, "two").await;
        assert_eq!(code, 554, "pipelining {pipelining}: {text}");
        assert!(text.contains("second refused"), "{text}");
        let (code, text) = send(&mut c, "three").await;
        assert_eq!((code, text.as_str()), (250, "2.0.0 taken"));
        let bodies = up.bodies();
        assert_eq!(bodies.len(), 3, "each message sent once");
        assert_ne!(
            bodies[0].0, bodies[1].0,
            "not on the connection out of step"
        );
        relay.stop().await;
    }
}

/// The first message is taken, and upstream sends one line more once the relay has answered
/// it and holds the connection idle for the next; the second is refused. The line is found
/// when the connection is taken again (it is in the socket, not yet read): that connection is
/// dropped, and the second message goes on a new one, with its own reply.
#[tokio::test]
async fn an_extra_line_sent_while_the_connection_is_idle_is_never_the_next_messages_reply() {
    for (pipelining, script) in both(|n| match n {
        0 => Answers {
            later: b"250 2.0.0 extra\r\n".to_vec(),
            ..Answers::default()
        },
        1 => Answers {
            dot: b"554 5.7.1 second refused\r\n".to_vec(),
            ..Answers::default()
        },
        _ => Answers::default(),
    }) {
        let up = Scripted::serve(pipelining, script).await;
        let (relay, mut c) = relay(&up).await;
        let (code, text) = send(&mut c, "one").await;
        assert_eq!((code, text.as_str()), (250, "2.0.0 taken"));
        up.send_later().await;
        let (code, text) = send(&mut c, "two").await;
        assert_eq!(code, 554, "pipelining {pipelining}: {text}");
        assert!(text.contains("second refused"), "{text}");
        let bodies = up.bodies();
        assert_eq!(bodies.len(), 2, "each message sent once");
        assert_ne!(
            bodies[0].0, bodies[1].0,
            "not on the connection out of step"
        );
        relay.stop().await;
    }
}

/// A `354` to the final dot answers some other command: the message may have been taken, so
/// the client is told so, and the connection goes.
#[tokio::test]
async fn a_354_to_the_final_dot_is_uncertain_and_ends_the_connection() {
    for (pipelining, script) in both(|n| match n {
        0 => Answers {
            dot: b"354 again\r\n".to_vec(),
            ..Answers::default()
        },
        _ => Answers::default(),
    }) {
        let up = Scripted::serve(pipelining, script).await;
        let (relay, mut c) = relay(&up).await;
        let (code, text) = send(&mut c, "one").await;
        assert_eq!(code, 451, "{text}");
        assert!(text.contains("may have been delivered"), "{text}");
        let (code, text) = send(&mut c, "two").await;
        assert_eq!((code, text.as_str()), (250, "2.0.0 taken"));
        let bodies = up.bodies();
        assert_ne!(bodies[0].0, bodies[1].0, "a new connection");
        relay.stop().await;
    }
}

/// DATA must be answered `354`: a `250` there (or a `354` to MAIL) is out of step, and a
/// reply sent before the body (early) too. The body never went: the client is told upstream
/// is unavailable (not "may have been delivered"), and nothing arrived.
#[tokio::test]
async fn a_wrong_code_or_an_early_reply_before_the_body_sends_nothing() {
    let cases: [(&str, Answers); 3] = [
        (
            "250 to DATA",
            Answers {
                data: b"250 2.0.0 ok\r\n".to_vec(),
                ..Answers::default()
            },
        ),
        (
            "354 to MAIL",
            Answers {
                mail: b"354 go\r\n".to_vec(),
                ..Answers::default()
            },
        ),
        (
            "the dot's reply before the body",
            Answers {
                data: b"354 go on\r\n250 2.0.0 early\r\n".to_vec(),
                ..Answers::default()
            },
        ),
    ];
    for (case, wrong) in cases {
        let first_only = move |n| match n {
            0 => wrong.clone(),
            _ => Answers::default(),
        };
        for (pipelining, script) in both(first_only) {
            let up = Scripted::serve(pipelining, script).await;
            let (relay, mut c) = relay(&up).await;
            let (code, text) = send(&mut c, "one").await;
            assert_eq!(code, 451, "{case}, pipelining {pipelining}: {text}");
            assert!(text.contains("Upstream unavailable"), "{case}: {text}");
            assert!(up.bodies().is_empty(), "{case}: no body went");
            let (code, text) = send(&mut c, "two").await;
            assert_eq!((code, text.as_str()), (250, "2.0.0 taken"), "{case}");
            assert_eq!(up.bodies().len(), 1, "{case}");
            relay.stop().await;
        }
    }
}

/// Upstream's text reaches the client as printable ASCII: an escape sequence, a NUL, a DEL or
/// a non-ASCII character becomes `?`, in a `250` as in a refusal.
#[tokio::test]
async fn upstream_control_characters_never_reach_the_client() {
    let script: Script = Arc::new(|n| match n {
        0 => Answers {
            dot: "250 2.0.0 ok \x1b[31mred\x00 \x7f caf\u{e9}\tid\r\n".into(),
            ..Answers::default()
        },
        _ => Answers {
            rcpt: "550 5.1.1 no \x1b]0;pwned\x07 such\x1b[2J user\r\n".into(),
            ..Answers::default()
        },
    });
    let up = Scripted::serve(false, script).await;
    let (relay, mut c) = relay(&up).await;
    let (code, text) = send(&mut c, "one").await;
    assert_eq!((code, text.as_str()), (250, "2.0.0 ok ?[31mred? ? caf? id"));
    assert_eq!(c.cmd("MAIL FROM:<a@example.com>").await.0, 250);
    let (code, text) = c.cmd("RCPT TO:<b@example.net>").await;
    // Refused at RCPT upstream: the relay answers the final dot with it.
    assert_eq!(code, 250, "{text}");
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: two\r\n\r\nbody\r\n.\r\n").await;
    let (code, text) = c.reply().await;
    assert_eq!(
        (code, text.as_str()),
        (550, "5.1.1 upstream: no ?]0;pwned? such?[2J user")
    );
    relay.stop().await;
}
