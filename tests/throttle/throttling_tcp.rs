//! Throttling end to end over real TCP in real time: clients connect to the relay's socket,
//! the relay forwards over SMTP to the test upstream. Exact timing and arrival order are
//! proven on a paused clock in `tests/throttle/throttling.rs` (same session code, in-memory streams);
//! here real time adds forwarding jitter (an earlier message forwarded more slowly than a
//! later one shortens the gap the upstream sees), so the rate check allows each pair of
//! receive times to be closer than their grants by up to `JITTER`.

use std::time::Duration;

use crate::support::relay::{smtp_relay, Client};
use crate::support::upstream::TestUpstream;

const JITTER: Duration = Duration::from_millis(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_concurrent_messages_of_one_tenant_all_pass_within_the_rate() {
    let up = TestUpstream::start().await;
    let layer = "pool_size = 1\n[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\n\
                 cost = \"message\"\nlimit = 5\ninterval_ms = 1000\nburst = 5\n";
    let relay = smtp_relay(&up.url(), "", layer).await;
    let mut clients = Vec::new();
    for i in 0..15 {
        let addr = relay.addr;
        clients.push(tokio::spawn(async move {
            let msg = format!("X-Tenant: acme\r\nSubject: m{i:02}\r\n\r\nx\r\n");
            let mut c = Client::connect(addr).await;
            c.send_mail("a@example.com", &["b@example.net"], msg.as_bytes())
                .await
        }));
    }
    for c in clients {
        let (code, text) = c.await.unwrap();
        assert_eq!(code, 250, "{text}");
    }
    let got = up.wait_for(15).await;
    let key_header_gone = got
        .iter()
        .all(|m| !String::from_utf8_lossy(&m.data).contains("X-Tenant"));
    assert!(key_header_gone);
    let interval = Duration::from_secs(1).as_nanos();
    for i in 0..got.len() {
        for j in i..got.len() {
            let n = (j - i + 1) as u128;
            let t = (got[j].at - got[i].at + JITTER).as_nanos();
            assert!(
                n * interval <= 5 * interval + 5 * t,
                "{n} messages in {t} ns"
            );
        }
    }
    relay.stop().await;
}
