//! The admin endpoint under a flood, while SMTP goes on: wrong passwords take the endpoint's
//! own check slots and lock the address out of the endpoint alone; half-sent requests hold
//! at most `max_connections` connections (one more gets 503 at once) and only until
//! `request_timeout_ms`. The clock is tokio's, paused and held still (`support::clock`) while
//! the test waits on real sockets, so it moves only when the test says.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::support::auth::{auth_config, cheap_hash, plain};
use crate::support::clock;
use crate::support::http::request;
use crate::support::relay::{memory_relay, Client, Relay};

/// SMTP AUTH for `app` (password `pw`, one check at a time) from loopback, and an admin
/// password `s3cret`, with `admin` keys.
async fn relay(admin: &str) -> (Relay, SocketAddr) {
    let smtp = format!(
        "trusted_networks = [\"192.0.2.0/24\"]\nallow_plaintext_auth = true\n{}",
        auth_config(&[("app", "pw", "")], "max_parallel_checks = 1")
    );
    let rest = format!(
        "[admin]\npassword_hash = \"{}\"\n{admin}\n",
        cheap_hash("s3cret")
    );
    let (relay, _) = memory_relay(&smtp, &rest).await;
    let addr = relay.start_admin().await;
    (relay, addr)
}

/// AUTH PLAIN as `app`, then one message; the two replies' codes.
async fn login_and_send(relay: &Relay) -> (u16, u16) {
    let mut c: Client = relay.client().await;
    assert_eq!(c.cmd("EHLO client.test").await.0, 250);
    let auth = c.cmd(&format!("AUTH PLAIN {}", plain("app", "pw"))).await.0;
    let sent = c
        .send_mail(
            "a@example.com",
            &["b@example.net"],
            b"Subject: s\r\n\r\nx\r\n",
        )
        .await
        .0;
    (auth, sent)
}

/// The status of each admin answer of `requests`, the held clock moved a second at a time
/// until every one is answered (the answers wait out failure delays).
async fn through_delays(requests: Vec<JoinHandle<(u16, String)>>) -> Vec<u16> {
    for _ in 0..100 {
        if requests.iter().all(|r| r.is_finished()) {
            break;
        }
        tokio::time::advance(Duration::from_millis(1_000)).await;
        clock::until_held("a moment", || true).await;
    }
    let mut codes = Vec::new();
    for answer in requests {
        codes.push(answer.await.unwrap().0);
    }
    codes
}

#[tokio::test(start_paused = true)]
async fn wrong_admin_passwords_take_the_admins_own_slots_and_lock_out_only_the_admin() {
    let (relay, admin) = relay("failure_delay_ms = 1000\nlockout_ms = 600000").await;
    let held = clock::hold();
    let flood: Vec<_> = (0..50)
        .map(|_| tokio::spawn(request(admin, "GET", "/metrics", Some("guess"))))
        .collect();
    // `max_failures` guesses are checked; every answer waits out the failure delay, which the
    // held clock does not let pass.
    let admin_checks = relay.services().admin_logins.checks.clone();
    clock::until_held("5 guesses checked", || admin_checks.checks() == 5).await;
    // SMTP AUTH and mail go on meanwhile.
    assert_eq!(login_and_send(&relay).await, (235, 250));
    assert!(
        flood.iter().all(|f| !f.is_finished()),
        "no guess answered before its delay"
    );
    let codes = through_delays(flood).await;
    let refused = codes.iter().filter(|&&c| c == 401).count();
    let locked = codes.iter().filter(|&&c| c == 429).count();
    assert_eq!(refused + locked, 50, "{codes:?}");
    assert_eq!(
        (refused, locked),
        (4, 46),
        "the fifth failure locks: {codes:?}"
    );
    let services = relay.services();
    assert_eq!(
        services.auth.checks.checks(),
        1,
        "SMTP AUTH's slots checked SMTP's one login, none of the admin's guesses"
    );
    assert_eq!(
        services.admin_logins.checks.checks(),
        5,
        "past max_failures in flight or failed, a guess costs no check"
    );
    // The address is locked out of the admin endpoint (the right password too), not of SMTP.
    let right = tokio::spawn(request(admin, "GET", "/metrics", Some("s3cret")));
    assert_eq!(through_delays(vec![right]).await, [429]);
    assert_eq!(login_and_send(&relay).await, (235, 250));
    tokio::time::advance(Duration::from_millis(600_000)).await;
    assert_eq!(
        request(admin, "GET", "/metrics", Some("s3cret")).await.0,
        200
    );
    drop(held);
    relay.stop().await;
}

/// Connects to `addr` and sends `bytes` (a request cut short), on a blocking thread.
async fn half_sent(addr: SocketAddr, bytes: &'static [u8]) -> TcpStream {
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(bytes).unwrap();
        stream
    })
    .await
    .unwrap()
}

/// All the relay sends on `stream` until it closes it; panics when it has not closed it
/// within 10 s of real time (so a connection the relay keeps fails the test, not hangs it).
async fn until_closed(mut stream: TcpStream) -> String {
    tokio::task::spawn_blocking(move || {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        match stream.read_to_end(&mut got) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("the relay kept the connection: {e}; got {got:?}"),
        }
        String::from_utf8_lossy(&got).to_string()
    })
    .await
    .unwrap()
}

/// Whether the relay still keeps `stream` open (nothing to read, no close).
async fn still_open(stream: &TcpStream) -> bool {
    let stream = stream.try_clone().unwrap();
    tokio::task::spawn_blocking(move || {
        stream.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let open = matches!((&stream).read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        stream.set_nonblocking(false).unwrap();
        open
    })
    .await
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn half_sent_admin_requests_hold_a_bounded_number_of_connections_for_a_bounded_time() {
    let (relay, admin) = relay("max_connections = 4\nrequest_timeout_ms = 5000").await;
    let held = clock::hold();
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(half_sent(admin, b"GET /metrics HTTP/1.1\r\nHost: relay\r\n").await);
    }
    // A body promised and never sent whole.
    let post = b"POST /ses/events HTTP/1.1\r\nHost: relay\r\ncontent-length: 100\r\n\r\n{\"Type\":";
    open.push(half_sent(admin, post).await);
    // One more connection: 503 at once, and closed.
    let busy = until_closed(half_sent(admin, b"GET /healthz HTTP/1.1\r\n\r\n").await).await;
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
    // Mail and SMTP AUTH go on meanwhile.
    assert_eq!(login_and_send(&relay).await, (235, 250));
    // Just before `request_timeout_ms` they are all kept; just after, none is.
    tokio::time::advance(Duration::from_millis(4_999)).await;
    for stream in &open {
        assert!(still_open(stream).await, "within request_timeout_ms");
    }
    tokio::time::advance(Duration::from_millis(2)).await;
    drop(held);
    let body_cut = open.pop().unwrap();
    for stream in open {
        let answer = until_closed(stream).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer}"
        );
    }
    let answer = until_closed(body_cut).await;
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");
    // Their slots are free again.
    assert_eq!(request(admin, "GET", "/healthz", None).await.0, 200);
    relay.stop().await;
}

/// The admin lockout lasts `lockout_ms` from the failure that locked, to the millisecond: the
/// right password is refused just before its end and taken just after.
#[tokio::test(start_paused = true)]
async fn the_admin_lockout_ends_at_lockout_ms() {
    let (relay, admin) = relay("failure_delay_ms = 0\nmax_failures = 1\nlockout_ms = 10000").await;
    let held = clock::hold();
    let locked_at = tokio::time::Instant::now();
    assert_eq!(
        request(admin, "GET", "/metrics", Some("guess")).await.0,
        429
    );
    tokio::time::advance(Duration::from_millis(9_999)).await;
    let before = request(admin, "GET", "/metrics", Some("s3cret")).await.0;
    assert_eq!(before, 429, "locked out until lockout_ms has passed");
    assert_eq!(
        tokio::time::Instant::now() - locked_at,
        Duration::from_millis(9_999)
    );
    tokio::time::advance(Duration::from_millis(2)).await;
    let after = request(admin, "GET", "/metrics", Some("s3cret")).await.0;
    assert_eq!(after, 200, "taken once lockout_ms has passed");
    drop(held);
    relay.stop().await;
}
