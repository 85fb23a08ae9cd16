//! PIPELINING upstream: MAIL, every RCPT and DATA arrive in one flight (one read of the
//! socket at the test upstream), the body and its final dot in the next; refusals among the pipelined replies
//! are relayed and leave the connection in step (or drop it when only that is safe); without
//! PIPELINING the commands still go one at a time.

use mailsluice::upstream::{Accepted, Forwarder, UpstreamError};

use super::{envelope, smtp_forwarder, SIMPLE};
use crate::support::upstream::{Fault, Step, TestUpstream};

async fn send(fwd: &impl Forwarder, rcpts: &[&str]) -> Result<Accepted, UpstreamError> {
    fwd.forward(&envelope(Some("a@x.test"), rcpts), SIMPLE)
        .await
}

fn refused(code: u16, enhanced: &str, text: &str) -> Result<Accepted, UpstreamError> {
    Err(UpstreamError::Rejected {
        code,
        enhanced: Some(enhanced.into()),
        text: text.into(),
    })
}

/// The flights of connection `conn` that begin with MAIL, and the one after each.
fn transactions(up: &TestUpstream, conn: usize) -> Vec<(Vec<String>, Option<Vec<String>>)> {
    let flights: Vec<Vec<String>> = up
        .flights()
        .into_iter()
        .filter(|(c, _)| *c == conn)
        .map(|(_, f)| f)
        .collect();
    (0..flights.len())
        .filter(|&i| flights[i][0].starts_with("MAIL"))
        .map(|i| (flights[i].clone(), flights.get(i + 1).cloned()))
        .collect()
}

fn lines(lines: &[&str]) -> Vec<String> {
    lines.iter().map(|l| l.to_string()).collect()
}

#[tokio::test]
async fn mail_rcpts_and_data_arrive_in_one_flight_and_the_body_with_its_dot_in_the_next() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "pool_size = 1");
    send(&fwd, &["b@y.test", "c@y.test"]).await.unwrap();
    send(&fwd, &["d@y.test"]).await.unwrap();
    let got = up.wait_for(2).await;
    assert_eq!(got[0].rcpts, ["b@y.test", "c@y.test"]);
    assert_eq!(got[1].data, SIMPLE);
    let envelope = lines(&[
        "MAIL FROM:<a@x.test>",
        "RCPT TO:<b@y.test>",
        "RCPT TO:<c@y.test>",
        "DATA",
    ]);
    let second = lines(&["MAIL FROM:<a@x.test>", "RCPT TO:<d@y.test>", "DATA"]);
    // One write of the body and its final dot: one wake-up of upstream, not two.
    let data = Some(lines(&["<data>", "."]));
    assert_eq!(
        transactions(&up, 1),
        [(envelope, data.clone()), (second, data)]
    );
    assert_eq!(up.connections(), 1);
}

#[tokio::test]
async fn without_pipelining_each_command_waits_for_its_reply() {
    let up = TestUpstream::start().await;
    up.without_pipelining();
    let fwd = smtp_forwarder(&up.url(), "");
    send(&fwd, &["b@y.test", "c@y.test"]).await.unwrap();
    assert_eq!(up.wait_for(1).await[0].rcpts, ["b@y.test", "c@y.test"]);
    let flights = up.flights();
    assert!(
        flights
            .iter()
            .all(|(_, f)| f.len() == 1 || f == &["<data>", "."]),
        "commands came together: {flights:?}"
    );
    let sent: Vec<String> = flights.into_iter().map(|(_, mut f)| f.remove(0)).collect();
    let at = sent.iter().position(|l| l.starts_with("MAIL")).unwrap();
    assert_eq!(
        sent[at..at + 5],
        lines(&[
            "MAIL FROM:<a@x.test>",
            "RCPT TO:<b@y.test>",
            "RCPT TO:<c@y.test>",
            "DATA",
            "<data>"
        ])
    );
}

/// MAIL 250, RCPT 550, DATA 503: every reply is read, so after the RSET the next message
/// reads its own replies on the same connection, not the stale ones of the first.
#[tokio::test]
async fn a_refused_rcpt_is_relayed_and_the_connection_stays_in_step() {
    let up = TestUpstream::start().await;
    up.refuse_rcpt("gone@y.test", "550 5.1.1 no such user");
    let fwd = smtp_forwarder(&up.url(), "pool_size = 1");
    let first = send(&fwd, &["gone@y.test"]).await;
    assert_eq!(first, refused(550, "5.1.1", "no such user"));
    let second = send(&fwd, &["b@y.test"]).await.expect("next message");
    assert_eq!(second.text, "2.0.0 Ok: queued as TEST1");
    let got = up.wait_for(1).await;
    assert_eq!((got[0].conn, up.connections()), (1, 1));
    let commands = up.commands();
    let rset = commands.iter().position(|c| c == "RSET").expect("RSET");
    let second_mail = commands.iter().rposition(|c| c.starts_with("MAIL"));
    assert!(Some(rset) < second_mail, "{commands:?}");
}

/// One recipient refused, another accepted, and DATA got 354: a lone dot would deliver an
/// empty message to the accepted one, so the connection is dropped before any data.
#[tokio::test]
async fn a_refused_rcpt_beside_an_accepted_one_sends_no_data_and_drops_the_connection() {
    let up = TestUpstream::start().await;
    up.refuse_rcpt("gone@y.test", "550 5.1.1 no such user");
    let fwd = smtp_forwarder(&up.url(), "pool_size = 1");
    let first = send(&fwd, &["b@y.test", "gone@y.test"]).await;
    assert_eq!(first, refused(550, "5.1.1", "no such user"));
    send(&fwd, &["c@y.test"]).await.expect("next message");
    let got = up.wait_for(1).await;
    assert_eq!(got.len(), 1, "the refused message reached upstream");
    assert_eq!(got[0].rcpts, ["c@y.test"]);
    assert_eq!((got[0].conn, up.connections()), (2, 2));
}

/// Every RCPT refused and yet DATA got 354 (RFC 2920 lets a server do that): the client
/// sends a lone dot, no body, and the relay answers with the RCPT's refusal.
#[tokio::test]
async fn all_rcpts_refused_and_data_accepted_gets_a_lone_dot() {
    let up = TestUpstream::start().await;
    up.set_data_without_rcpts(true);
    up.set_fault(Fault::reply(Step::Rcpt, 550, "5.1.1 no such user"));
    let fwd = smtp_forwarder(&up.url(), "pool_size = 1");
    let first = send(&fwd, &["b@y.test", "c@y.test"]).await;
    assert_eq!(first, refused(550, "5.1.1", "no such user"));
    assert_eq!(up.unaddressed(), [b"".to_vec()], "a body was sent");
    up.set_fault(Fault::None);
    send(&fwd, &["d@y.test"]).await.expect("next message");
    let got = up.wait_for(1).await;
    assert_eq!((got[0].conn, up.connections()), (1, 1));
}

/// MAIL refused in a pipelined group: RCPT and DATA were already sent with it, and their
/// `503`s are read too, so the next message on the connection reads its own replies. The
/// client hears MAIL's refusal, not a later one.
#[tokio::test]
async fn a_refused_mail_in_the_group_is_relayed_and_the_connection_stays_in_step() {
    let up = TestUpstream::start().await;
    up.set_fault(Fault::reply(Step::Mail, 553, "5.1.8 sender domain refused"));
    let fwd = smtp_forwarder(&up.url(), "pool_size = 1");
    let first = send(&fwd, &["b@y.test", "c@y.test"]).await;
    assert_eq!(first, refused(553, "5.1.8", "sender domain refused"));
    let group = lines(&[
        "MAIL FROM:<a@x.test>",
        "RCPT TO:<b@y.test>",
        "RCPT TO:<c@y.test>",
        "DATA",
    ]);
    up.set_fault(Fault::None);
    send(&fwd, &["d@y.test"]).await.expect("next message");
    let got = up.wait_for(1).await;
    assert_eq!(got[0].rcpts, ["d@y.test"]);
    assert_eq!((got[0].conn, up.connections()), (1, 1));
    assert_eq!(transactions(&up, 1)[0], (group, Some(lines(&["RSET"]))));
}

#[tokio::test]
async fn a_refused_data_is_relayed_and_the_connection_stays_in_step() {
    let up = TestUpstream::start().await;
    up.set_fault(Fault::reply(Step::Data, 554, "5.3.4 message too big"));
    let fwd = smtp_forwarder(&up.url(), "pool_size = 1");
    let first = send(&fwd, &["b@y.test", "c@y.test"]).await;
    assert_eq!(first, refused(554, "5.3.4", "message too big"));
    up.set_fault(Fault::None);
    send(&fwd, &["d@y.test"]).await.expect("next message");
    let got = up.wait_for(1).await;
    assert_eq!((got[0].conn, up.connections()), (1, 1));
}

/// More than a hundred commands go in groups of a hundred, each group's replies read before
/// the next is written; a refusal in the first group stops there.
#[tokio::test]
async fn many_recipients_go_in_groups_and_a_refusal_stops_at_its_group() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "pool_size = 1");
    let rcpts: Vec<String> = (0..150).map(|i| format!("u{i}@y.test")).collect();
    let rcpts: Vec<&str> = rcpts.iter().map(String::as_str).collect();
    send(&fwd, &rcpts).await.unwrap();
    assert_eq!(up.wait_for(1).await[0].rcpts.len(), 150);
    let sizes: Vec<usize> = up.flights().iter().map(|(_, f)| f.len()).collect();
    assert!(sizes.ends_with(&[100, 52, 2]), "{sizes:?}");

    up.refuse_rcpt("u5@y.test", "550 5.1.1 no such user");
    let before = up.flights().len();
    let result = send(&fwd, &rcpts).await;
    assert_eq!(result, refused(550, "5.1.1", "no such user"));
    send(&fwd, &["b@y.test"]).await.expect("next message");
    let flights = up.flights();
    let sizes: Vec<usize> = flights[before..].iter().map(|(_, f)| f.len()).collect();
    // The first group, then RSET, then the next message (no second group, no data).
    assert_eq!(sizes, [100, 1, 3, 2], "{flights:?}");
    assert_eq!(flights[before + 1].1, ["RSET"]);
    assert_eq!(up.connections(), 1);
}

/// Upstream hangs up after the first line of a large body: the final dot was never written,
/// so upstream cannot have the message. That is "unavailable" (the client may send again),
/// not "uncertain", which is kept for a failure after the whole body went.
#[tokio::test]
async fn a_body_cut_short_is_unavailable_not_uncertain() {
    let up = TestUpstream::start().await;
    up.set_fault(Fault::DropMidData);
    let fwd = smtp_forwarder(&up.url(), "timeout_ms = 20000");
    let mut message = b"Subject: big\r\n\r\n".to_vec();
    while message.len() < 32 * 1024 * 1024 {
        message.extend_from_slice(&[b'x'; 998]);
        message.extend_from_slice(b"\r\n");
    }
    let env = envelope(Some("a@x.test"), &["b@y.test"]);
    let result = fwd.forward(&env, &message).await;
    assert!(
        matches!(&result, Err(UpstreamError::Unavailable(e)) if e.contains("sending the body")),
        "{result:?}"
    );
    assert!(up.messages().is_empty());
}
