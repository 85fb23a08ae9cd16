//! `bench/ses.sh`: `ses://` (SESv2 `SendEmail` through the AWS SDK) next to `smtp://`, each
//! against its fake 20 ms away (a proxy that holds every byte the relay's forwarder sends for
//! `delay_ms`, as a network with that round-trip time would), with the same pool size, in one
//! run. Per kind: the time of one message alone (mean of `sequential` messages sent one after
//! the other, over kept-alive connections), as round trips of `delay_ms`, and messages/s with
//! `messages` sent at once through the pool.
//!
//! ```text
//! ses_latency <delay_ms> <pool_size> <sequential> <messages>
//! ```

use mailsluice_test_support as support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mailsluice::config::Config;
use mailsluice::message::Envelope;
use mailsluice::upstream::{Forwarder, SmtpForwarder};
use tokio::net::TcpListener;
use tokio::time::Instant;

use support::config::TestConfig;
use support::ses::{forwarder, FakeSes, GOOD_KEY};
use support::upstream::TestUpstream;

#[tokio::main]
async fn main() {
    let args: Vec<u64> = (std::env::args().skip(1))
        .map(|a| a.parse().expect("a number"))
        .collect();
    let [delay, pool, sequential, messages] = args.as_slice() else {
        panic!("usage: ses_latency <delay_ms> <pool_size> <sequential> <messages>");
    };
    let delay = Duration::from_millis(*delay);
    let smtp_up = TestUpstream::start().await;
    let ses_up = FakeSes::start().await;
    let smtp_far = delayed(smtp_up.addr(), delay).await;
    let ses_far = delayed(ses_up.addr, delay).await;
    let text = |url: &str, extra: &str| {
        TestConfig::new()
            .upstream(url)
            .then(&format!("pool_size = {pool}\ntimeout_ms = 30000"))
            .then(extra)
            .text()
    };
    let smtp_cfg = text(&format!("smtp://{smtp_far}"), "tls = \"none\"");
    let smtp_cfg = Config::parse(&smtp_cfg).unwrap().upstreams.remove(0);
    let smtp: Arc<dyn Forwarder> = Arc::new(SmtpForwarder::new(&smtp_cfg).unwrap());
    let ses_cfg = text(
        "ses://eu-west-1",
        &format!("endpoint_url = \"http://{ses_far}\""),
    );
    let ses: Arc<dyn Forwarder> = forwarder(&ses_cfg, GOOD_KEY);
    println!("kind  pool  one message (ms)  round trips  messages/s ({messages} at once)");
    for (kind, fwd) in [("smtp", smtp), ("ses", ses)] {
        let (one, rate) = measure(fwd, *sequential as usize, *messages as usize).await;
        let trips = one.as_secs_f64() / delay.as_secs_f64();
        let ms = one.as_secs_f64() * 1000.0;
        println!("{kind:<5} {pool:>4}  {ms:>16.1}  {trips:>11.2}  {rate:>10.1}");
    }
}

/// The mean time of one message alone (after a first one that opens the connection), and
/// messages/s with `messages` at once.
async fn measure(fwd: Arc<dyn Forwarder>, sequential: usize, messages: usize) -> (Duration, f64) {
    let envelope = Envelope {
        from: Some("app@example.com".into()),
        rcpts: vec!["to@example.net".into()],
        ..Envelope::default()
    };
    let body = format!("Subject: bench\r\n\r\n{}\r\n", "x".repeat(1000));
    fwd.forward(&envelope, body.as_bytes())
        .await
        .expect("warm-up");
    let started = Instant::now();
    for _ in 0..sequential {
        fwd.forward(&envelope, body.as_bytes()).await.expect("sent");
    }
    let one = started.elapsed() / sequential as u32;
    let started = Instant::now();
    let tasks: Vec<_> = (0..messages)
        .map(|_| {
            let (fwd, envelope, body) = (fwd.clone(), envelope.clone(), body.clone());
            tokio::spawn(async move { fwd.forward(&envelope, body.as_bytes()).await.is_ok() })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap(), "every message accepted");
    }
    (one, messages as f64 / started.elapsed().as_secs_f64())
}

/// A port whose connections reach `target` with what the client sends held `delay`.
async fn delayed(target: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    support::delay::serve(listener, target, delay);
    addr
}
