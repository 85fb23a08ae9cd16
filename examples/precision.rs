//! Throttle precision through the whole relay (a benchmark; run by
//! `bench/precision.sh`). One tenant's layer at `LIMIT` messages/s is saturated by many
//! concurrent SMTP clients for `SECONDS`; the relay forwards over SMTP to a sink in this
//! process that timestamps each message. From the sink's receive times it reports the largest
//! excess over `burst + limit * t / interval` in any window, the utilization of the allowed
//! quota, and how late each grant was against its due time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mailsluice::config::Config;
use mailsluice::upstream::{ForwardFuture, Forwarder, Outgoing, OwnAddresses};
use mailsluice_test_support::config::TestConfig;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const LIMIT: u64 = 200;
const BURST: u64 = 200;
const CLIENTS: usize = 400;

#[tokio::main]
async fn main() {
    let seconds: u64 = std::env::args().nth(1).map_or(10, |s| s.parse().unwrap());
    let times = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let sink = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sink_addr = sink.local_addr().unwrap();
    tokio::spawn(run_sink(sink, times.clone()));

    let text = TestConfig::new()
        .upstream(&format!("smtp://{sink_addr}"))
        .then("tls = \"none\"\npool_size = 32")
        .then(&format!(
            "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
             limit = {LIMIT}\ninterval_ms = 1000\nburst = {BURST}\nmax_wait_ms = 60000"
        ))
        .text();
    let config = Arc::new(Config::parse(&text).unwrap());
    let grants = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let forwarder = Arc::new(Stamped {
        inner: mailsluice::upstream::build_forwarder(
            &config.upstreams[0],
            &OwnAddresses::default(),
        )
        .unwrap(),
        times: grants.clone(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = listener.local_addr().unwrap();
    let (_trigger, shutdown) = mailsluice::state::shutdown::channel();
    let upstreams = mailsluice::upstream::Upstreams::with_first(&config, forwarder).unwrap();
    let deps = mailsluice::Deps::new(config, upstreams);
    tokio::spawn(mailsluice::run(vec![listener], deps, shutdown));

    let start = Instant::now();
    let stop = start + Duration::from_secs(seconds);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| tokio::spawn(client(relay_addr, stop)))
        .collect();
    let mut refused = 0;
    for c in clients {
        refused += c.await.unwrap();
    }
    let mut t = times.lock().unwrap().clone();
    t.sort();
    let mut g = grants.lock().unwrap().clone();
    g.sort();
    println!("answered other than 250:       {refused}");
    println!(
        "-- at the relay (when each message was handed to the forwarder, right after its grant):"
    );
    report(&g);
    println!("-- at the sink (receive times, including forwarding jitter):");
    report(&t);
}

/// Timestamps each message as the relay hands it upstream, i.e. right after its grant.
struct Stamped {
    inner: Arc<dyn Forwarder>,
    times: Arc<Mutex<Vec<Instant>>>,
}

impl Forwarder for Stamped {
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        self.times.lock().unwrap().push(Instant::now());
        self.inner.send(message)
    }
}

/// Sends messages of one tenant back to back on one connection until `stop`; returns how
/// many were not answered 250.
async fn client(addr: std::net::SocketAddr, stop: Instant) -> usize {
    let stream = TcpStream::connect(addr).await.unwrap();
    let mut s = BufReader::new(stream);
    let mut refused = 0;
    read_reply(&mut s).await;
    send(&mut s, "EHLO bench\r\n").await;
    read_reply(&mut s).await;
    while Instant::now() < stop {
        let msg = "MAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.net>\r\nDATA\r\n";
        send(&mut s, msg).await;
        for _ in 0..3 {
            read_reply(&mut s).await;
        }
        send(
            &mut s,
            "X-Tenant: acme\r\nSubject: bench\r\n\r\nhello\r\n.\r\n",
        )
        .await;
        let code = read_reply(&mut s).await;
        if code != 250 {
            if refused == 0 {
                eprintln!("first refusal: {code}");
            }
            refused += 1;
        }
    }
    send(&mut s, "QUIT\r\n").await;
    refused
}

async fn send(s: &mut BufReader<TcpStream>, text: &str) {
    s.get_mut().write_all(text.as_bytes()).await.unwrap();
}

async fn read_reply(s: &mut BufReader<TcpStream>) -> u16 {
    loop {
        let mut line = String::new();
        if s.read_line(&mut line).await.unwrap() == 0 {
            return 0;
        }
        if line.as_bytes().get(3) != Some(&b'-') {
            return line[..3].parse().unwrap_or(0);
        }
    }
}

/// A minimal SMTP sink that timestamps each message at its final dot.
async fn run_sink(listener: TcpListener, times: Arc<Mutex<Vec<Instant>>>) {
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let times = times.clone();
        tokio::spawn(async move {
            let mut s = BufReader::new(stream);
            send(&mut s, "220 sink\r\n").await;
            let mut in_data = false;
            let mut line = String::new();
            loop {
                line.clear();
                if s.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                let reply = if in_data {
                    if line != ".\r\n" {
                        continue;
                    }
                    in_data = false;
                    times.lock().unwrap().push(Instant::now());
                    "250 ok\r\n"
                } else {
                    match line.get(..4).map(|v| v.to_ascii_uppercase()).as_deref() {
                        Some("EHLO") => "250-sink\r\n250 PIPELINING\r\n",
                        Some("DATA") => {
                            in_data = true;
                            "354 go\r\n"
                        }
                        Some("QUIT") => {
                            send(&mut s, "221 bye\r\n").await;
                            return;
                        }
                        _ => "250 ok\r\n",
                    }
                };
                send(&mut s, reply).await;
            }
        });
    }
}

fn report(t: &[Instant]) {
    let interval = 1_000_000_000u128;
    let (limit, burst) = (LIMIT as u128, BURST as u128);
    // Largest excess over burst + limit*t/interval in any window [t_i, t_j].
    let mut worst = 0f64;
    for i in 0..t.len() {
        for j in i..t.len() {
            let allowed =
                burst as f64 + limit as f64 * (t[j] - t[i]).as_nanos() as f64 / interval as f64;
            worst = worst.max((j - i + 1) as f64 - allowed);
            if (t[j] - t[i]).as_nanos() > 3 * interval {
                break;
            }
        }
    }
    let span = (t[t.len() - 1] - t[0]).as_nanos();
    let allowed = burst + limit * span / interval;
    let utilization = t.len() as f64 / allowed as f64;
    // Due time of grant k: the bucket is full at the first take, then one token per 1/limit.
    let step = interval / limit;
    let mut late: Vec<u128> = t
        .iter()
        .enumerate()
        .map(|(k, at)| {
            let due = (k as u128 + 1).saturating_sub(burst) * step;
            (at.duration_since(t[0]).as_nanos()).saturating_sub(due)
        })
        .collect();
    late.sort();
    let pct = |p: f64| late[((late.len() - 1) as f64 * p) as usize] as f64 / 1e6;
    println!("messages delivered:            {}", t.len());
    println!("span of times:         {:.3} s", span as f64 / 1e9);
    println!(
        "largest excess in any window:  {:.3} messages (must be <= 0)",
        worst.max(0.0)
    );
    println!(
        "utilization of the quota:      {:.2} %",
        utilization * 100.0
    );
    println!(
        "lateness vs due time:          p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
}
