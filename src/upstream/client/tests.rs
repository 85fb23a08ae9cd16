//! The client against a scripted server on loopback: each test says what the server sends,
//! and checks what the client made of it and what it wrote.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A server that answers each line it reads with the next of `answers` (written as they
/// are, several replies at once if an answer holds them), after `greeting`; anything read
/// once they have run out closes the connection. It returns everything it read.
async fn scripted(
    greeting: &'static [u8],
    answers: Vec<&'static [u8]>,
) -> (TcpStream, tokio::task::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        sock.write_all(greeting).await.unwrap();
        let (mut read, mut answers) = (Vec::new(), answers.into_iter());
        let mut buf = [0u8; 1024];
        loop {
            let n = sock.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            read.extend_from_slice(&buf[..n]);
            let lines = buf[..n].iter().filter(|&&b| b == b'\n').count();
            for _ in 0..lines.max(1) {
                match answers.next() {
                    Some(answer) => sock.write_all(answer).await.unwrap(),
                    None => return String::from_utf8(read).unwrap(),
                }
            }
        }
        String::from_utf8(read).unwrap()
    });
    (TcpStream::connect(addr).await.unwrap(), server)
}

#[tokio::test]
async fn auth_login_goes_when_plain_is_not_offered() {
    let answers = vec![
        &b"250-mx.test\r\n250 AUTH LOGIN\r\n"[..],
        b"334 VXNlcm5hbWU6\r\n",
        b"334 UGFzc3dvcmQ6\r\n",
        b"235 2.7.0 ok\r\n",
    ];
    let (tcp, server) = scripted(b"220 mx.test ESMTP\r\n", answers).await;
    let mut client = Client::plain(tcp, TIMEOUT).await.unwrap();
    client.ehlo("relay.test").await.unwrap();
    let login = Credentials {
        user: "relay".into(),
        password: "s3cret".into(),
    };
    assert!(client.auth(&login).await.unwrap());
    drop(client);
    let wrote = server.await.unwrap();
    assert_eq!(
        wrote, "EHLO relay.test\r\nAUTH LOGIN\r\ncmVsYXk=\r\nczNjcmV0\r\n",
        "the user and the password, each in base64"
    );
}

#[tokio::test]
async fn no_auth_is_sent_when_neither_mechanism_is_offered() {
    let answers = vec![&b"250-mx.test\r\n250 AUTH CRAM-MD5\r\n"[..]];
    let (tcp, server) = scripted(b"220 mx.test\r\n", answers).await;
    let mut client = Client::plain(tcp, TIMEOUT).await.unwrap();
    client.ehlo("relay.test").await.unwrap();
    let login = Credentials {
        user: "u".into(),
        password: "p".into(),
    };
    assert!(!client.auth(&login).await.unwrap());
    drop(client);
    assert_eq!(server.await.unwrap(), "EHLO relay.test\r\n");
}

/// Replies that come together (a pipelined group's) are read one at a time, in order, and
/// what follows one stays for the next read.
#[tokio::test]
async fn replies_are_read_one_by_one() {
    let answers = vec![&b"250 2.1.0 ok\r\n250-2.1.5\r\n250 ok\r\n354 go\r\n"[..]];
    let (tcp, server) = scripted(b"220-mx.test\r\n220 hi\r\n", answers).await;
    let mut client = Client::plain(tcp, TIMEOUT).await.unwrap();
    client.send(b"MAIL FROM:<a@x.test>\r\n").await.unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let reply = client.read_reply().await.unwrap();
        got.push((reply.code, reply.into_line()));
    }
    let want = [(250, "2.1.0 ok"), (250, "2.1.5 ok"), (354, "go")];
    assert_eq!(got, want.map(|(c, t)| (c, t.to_string())));
    assert!(
        client.buf.is_empty() && client.pos == 0,
        "nothing left over"
    );
    drop(client);
    server.await.unwrap();
}

#[tokio::test]
async fn a_refusal_keeps_the_connection_and_a_close_breaks_it() {
    let answers = vec![&b"550 5.1.1 no such user\r\n"[..]];
    let (tcp, _server) = scripted(b"220 mx.test\r\n", answers).await;
    let mut client = Client::plain(tcp, TIMEOUT).await.unwrap();
    // Read by its code first, as a pipelined reply is: a refusal still comes whole.
    let refused = client
        .command_ok(b"RCPT TO:<x@y.test>\r\n", 2)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(550));
    assert_eq!(refused.to_string(), "550 5.1.1 no such user");
    assert!(!client.is_broken());
    let closed = client.command(b"NOOP\r\n").await.unwrap_err();
    assert!(matches!(closed, ClientError::Closed), "{closed:?}");
    assert!(client.is_broken());
}

/// The bound: a reply larger than `MAX_REPLY` fails the read and breaks the connection,
/// without holding more than the bound and a read.
#[tokio::test]
async fn a_reply_past_its_bound_breaks_the_connection() {
    let line: &'static [u8] = Box::leak(
        format!("250-{}\r\n", "x".repeat(998))
            .into_bytes()
            .into_boxed_slice(),
    );
    let flood: &'static [u8] = Box::leak(
        line.repeat(reply::MAX_REPLY / line.len() + 2)
            .into_boxed_slice(),
    );
    let (tcp, _server) = scripted(b"220 mx.test\r\n", vec![flood]).await;
    let mut client = Client::plain(tcp, TIMEOUT).await.unwrap();
    let err = client.command(b"EHLO relay.test\r\n").await.unwrap_err();
    assert!(
        matches!(err, ClientError::Malformed(Malformed::TooLarge)),
        "{err:?}"
    );
    assert!(client.is_broken());
    assert!(client.buf.len() <= reply::MAX_REPLY + READ + line.len());
}

/// Upstream's answer to STARTTLS must be the last thing it sent in clear: a reply behind it
/// would be read as the encrypted session's (CVE-2011-0411, the other way round).
#[tokio::test]
async fn bytes_behind_the_starttls_answer_end_the_connection() {
    let answers = vec![&b"220 go ahead\r\n250 2.1.0 injected\r\n"[..]];
    let (tcp, server) = scripted(b"220 mx.test\r\n", answers).await;
    let mut client = Client::plain(tcp, TIMEOUT).await.unwrap();
    let tls = Tls::unverified("mx.test").unwrap();
    let err = client.starttls(&tls, "relay.test").await.unwrap_err();
    assert!(matches!(err, ClientError::Tls(_)), "{err:?}");
    assert!(client.is_broken());
    drop(client);
    assert_eq!(server.await.unwrap(), "STARTTLS\r\n", "no handshake began");
}
