//! The far upstream of `bench/latency.sh`: the test upstream (PIPELINING advertised or not)
//! behind a proxy that holds every byte the client sends for `delay_ms` before passing it on,
//! as a network with that round-trip time would. Replies come back at once, so a client that
//! waits for each reply pays one `delay_ms` per command; one that pipelines pays it once per
//! flight.
//!
//! ```text
//! latency <port> <delay_ms> <on|off> <messages>
//! ```
//! Listens on 127.0.0.1:<port>; once `messages` messages arrived, prints one line and exits:
//! `messages=<n> rate=<messages/s between the first and the last> flights=<flights per message>`.
//! A flight is a group of lines that arrived in one read at the upstream (a command, a
//! pipelined group of commands, or a message's data): one round trip each.
//! `LATENCY_SHOW_FLIGHTS=<n>` prints the first `n` flights to stderr.

#[path = "../tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use support::upstream::TestUpstream;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [port, delay, pipelining, messages] = args.as_slice() else {
        panic!("usage: latency <port> <delay_ms> <on|off> <messages>");
    };
    let port: u16 = port.parse().expect("port");
    let delay = Duration::from_millis(delay.parse().expect("delay_ms"));
    let messages: usize = messages.parse().expect("messages");
    let up = TestUpstream::start().await;
    if pipelining == "off" {
        up.without_pipelining();
    }
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    let target = up.addr();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(proxy(client, target, delay));
        }
    });
    let got = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let got = up.messages();
        if got.len() >= messages {
            break got;
        }
    };
    let span = got[got.len() - 1].at - got[0].at;
    let rate = (got.len() - 1) as f64 / span.as_secs_f64();
    let flights = up.flights().len() as f64 / got.len() as f64;
    if let Ok(n) = std::env::var("LATENCY_SHOW_FLIGHTS") {
        for (conn, flight) in up.flights().iter().take(n.parse().unwrap_or(20)) {
            eprintln!("{conn}: {flight:?}");
        }
    }
    println!("messages={} rate={rate:.1} flights={flights:.2}", got.len());
}

/// Passes bytes both ways; what the client sends is held `delay` from when it was read.
async fn proxy(client: TcpStream, target: SocketAddr, delay: Duration) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    tokio::spawn(async move {
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = client_read.read(&mut buf).await {
            if tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    });
    tokio::spawn(async move {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if server_write.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = server_write.shutdown().await;
    });
    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
    let _ = client_write.shutdown().await;
}
