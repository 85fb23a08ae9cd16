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

use mailsluice_test_support as support;

use std::time::Duration;

use tokio::net::TcpListener;

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
    support::delay::serve(listener, up.addr(), delay);
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
