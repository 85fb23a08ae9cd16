//! Upstream's SMTP replies read by mailsluice's parser (`src/upstream/client/reply.rs`,
//! compiled in from its own file so that no copy can drift from it) and by smtp-proto's
//! client-side parser (`smtp_proto::response::parser::ResponseReceiver`), on the same inputs
//! in one run:
//!
//! 1. What each makes of the cases mailsluice's tests check (one reply, multi-line replies,
//!    enhanced status codes, the bound on a reply's size, the malformed replies refused). For
//!    smtp-proto the reply is rebuilt as mailsluice's client needs it: the code, the text
//!    with the enhanced status code smtp-proto takes out put back in front, and the bytes
//!    used; `NeedsMoreData` is "more must be read".
//! 2. The time and allocations per reply on the replies a relay reads most, median of
//!    several rounds in which the parsers take turns. "smtp-proto" is its parser alone,
//!    "smtp-proto + text" with the text rebuilt as above (what a switch would run).

#[allow(dead_code)]
#[path = "../../../src/upstream/client/reply.rs"]
mod reply;

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use smtp_proto::response::parser::ResponseReceiver;
use smtp_proto::Error;

use reply::{Reply, MAX_REPLY};

/// Counts allocations and their bytes, for the allocations per reply.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A parser's answer as the client uses it: a reply and the bytes it took, `None` when more
/// must be read, or why the bytes are no reply.
type Parsed = Result<Option<(Reply, usize)>, String>;

/// A parser as timed: bytes in, something of the answer out (so that nothing is skipped).
type Timed<'a> = &'a dyn Fn(&[u8]) -> usize;

fn ours(bytes: &[u8]) -> Parsed {
    reply::parse(bytes).map_err(|e| e.to_string())
}

/// smtp-proto's parser, its answer made into mailsluice's `Reply`.
fn smtp_proto(bytes: &[u8]) -> Parsed {
    let mut rest = bytes.iter();
    match ResponseReceiver::default().parse(&mut rest) {
        Ok(response) => {
            let used = bytes.len() - rest.as_slice().len();
            let text = match response.esc {
                [0, 0, 0] => response.message,
                [class, subject, detail] => {
                    let mut text = String::with_capacity(response.message.len() + 12);
                    let _ = write!(text, "{class}.{subject}.{detail}");
                    if !response.message.is_empty() {
                        text.push(' ');
                        text.push_str(&response.message);
                    }
                    text
                }
            };
            let reply = Reply {
                code: response.code,
                text,
            };
            Ok(Some((reply, used)))
        }
        Err(Error::NeedsMoreData { .. }) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// smtp-proto's parser alone, for its time: the code and the message's length.
fn smtp_proto_alone(bytes: &[u8]) -> usize {
    match ResponseReceiver::default().parse(&mut bytes.iter()) {
        Ok(response) => usize::from(response.code) + response.message.len(),
        Err(_) => 0,
    }
}

fn shown(parsed: &Parsed) -> String {
    match parsed {
        Ok(None) => "more must be read".into(),
        Err(e) => format!("refused ({e})"),
        Ok(Some((reply, used))) => {
            let text: String = reply.text.chars().take(48).collect();
            let cut = if text.len() < reply.text.len() {
                format!("... ({} bytes)", reply.text.len())
            } else {
                String::new()
            };
            format!("{} {text:?}{cut}, {used} bytes used", reply.code)
        }
    }
}

/// Equal answers; two refusals are equal whatever their reasons.
fn same(a: &Parsed, b: &Parsed) -> bool {
    match (a, b) {
        (Err(_), Err(_)) => true,
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn parity() -> usize {
    let long_line = format!("250-{}\r\n", "x".repeat(1000));
    let flood = long_line.repeat(MAX_REPLY / long_line.len() + 1);
    let endless = format!("250 {}", "x".repeat(MAX_REPLY));
    let under = format!(
        "{}250 end\r\n",
        long_line.repeat(MAX_REPLY / long_line.len() - 1)
    );
    let five_kib = format!("{}250 end\r\n", long_line.repeat(5));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("one line", b"250 2.0.0 Ok: queued as 1\r\n".to_vec()),
        (
            "EHLO, three lines",
            b"250-mx.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n".to_vec(),
        ),
        ("a code alone", b"354\r\n".to_vec()),
        ("a bare LF ends a line", b"221 bye\n".to_vec()),
        ("an empty line", b"250-\r\n250 x\r\n".to_vec()),
        ("the next reply is left", b"250 a\r\n354 go\r\n".to_vec()),
        ("the last line not read yet", b"250-a\r\n250 b".to_vec()),
        ("nothing read yet", b"".to_vec()),
        (
            "a repeated enhanced code",
            b"550-5.7.25 no PTR for\r\n550-5.7.25 this address\r\n550 5.7.25 see x\r\n".to_vec(),
        ),
        (
            "an enhanced code on the first line only",
            b"550-5.7.1 first\r\n550 second\r\n".to_vec(),
        ),
        (
            "two enhanced codes",
            b"550-5.7.1 a\r\n550 4.7.1 b\r\n".to_vec(),
        ),
        ("a code that is no word", b"450 4.2.0b\r\n".to_vec()),
        (
            "an enhanced code of three digits",
            b"550 5.100.999 x\r\n".to_vec(),
        ),
        (
            "class 3 is no enhanced code",
            b"250 3.2.1 busy\r\n".to_vec(),
        ),
        ("no code", b"hello\r\n".to_vec()),
        ("a short code", b"25\r\n".to_vec()),
        ("a code below 200", b"150 x\r\n".to_vec()),
        ("no separator", b"250x\r\n".to_vec()),
        ("mixed codes", b"250-a\r\n550 b\r\n".to_vec()),
        ("not UTF-8", b"250 caf\xe9\r\n".to_vec()),
        ("5 KiB of EHLO lines", five_kib.into_bytes()),
        ("just under the 64 KiB bound", under.into_bytes()),
        ("lines past the 64 KiB bound", flood.into_bytes()),
        ("one line past the 64 KiB bound", endless.into_bytes()),
    ];
    println!("## What each parser makes of the tests' cases\n");
    println!("| case | mailsluice | smtp-proto | same |");
    println!("|---|---|---|---|");
    let mut differ = 0;
    for (name, bytes) in &cases {
        let (a, b) = (ours(bytes), smtp_proto(bytes));
        let same = same(&a, &b);
        differ += usize::from(!same);
        let cell = |p: &Parsed| shown(p).replace('|', "\\|");
        let verdict = if same { "yes" } else { "**no**" };
        println!("| {name} | {} | {} | {verdict} |", cell(&a), cell(&b));
    }
    println!("\n{differ} of {} cases differ.\n", cases.len());
    differ
}

/// Nanoseconds per call of `f` over `iterations` calls.
fn per_call(f: Timed, bytes: &[u8], iterations: u32) -> f64 {
    let start = Instant::now();
    for _ in 0..iterations {
        black_box(f(black_box(bytes)));
    }
    start.elapsed().as_nanos() as f64 / f64::from(iterations)
}

/// Allocations and bytes allocated by one call of `f`.
fn allocations(f: Timed, bytes: &[u8]) -> (usize, usize) {
    let (count, size) = (
        ALLOCATIONS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    black_box(f(black_box(bytes)));
    (
        ALLOCATIONS.load(Ordering::Relaxed) - count,
        BYTES.load(Ordering::Relaxed) - size,
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn timing(rounds: usize) {
    let inputs: [(&str, &[u8]); 5] = [
        ("RCPT's 250", b"250 2.1.5 Ok\r\n"),
        (
            "the final dot's 250 (SES)",
            b"250 Ok 0100018f2c3a4b5c-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d-000000\r\n",
        ),
        ("DATA's 354", b"354 End data with <CR><LF>.<CR><LF>\r\n"),
        (
            "EHLO, 11 lines",
            b"250-mail.example.com\r\n250-PIPELINING\r\n250-SIZE 10240000\r\n250-VRFY\r\n\
              250-ETRN\r\n250-STARTTLS\r\n250-ENHANCEDSTATUSCODES\r\n250-8BITMIME\r\n\
              250-DSN\r\n250-SMTPUTF8\r\n250 CHUNKING\r\n",
        ),
        (
            "a refusal, 2 lines",
            b"550-5.7.1 Service unavailable, client host blocked using\r\n\
              550 5.7.1 zen.spamhaus.org; see https://www.spamhaus.org/\r\n",
        ),
    ];
    let parsers: [(&str, Timed); 3] = [
        ("mailsluice", &|b| {
            ours(b).map_or(0, |r| r.map_or(0, |(r, _)| r.text.len()))
        }),
        ("smtp-proto", &smtp_proto_alone),
        ("smtp-proto + text", &|b| {
            smtp_proto(b).map_or(0, |r| r.map_or(0, |(r, _)| r.text.len()))
        }),
    ];
    println!("## Time and allocations per reply (median of {rounds} rounds)\n");
    println!("| reply | parser | ns per reply | allocations (bytes) |");
    println!("|---|---|---|---|");
    for (name, bytes) in inputs {
        // About 20 ms per parser and round, as long as mailsluice's parser takes.
        let iterations = {
            let once = per_call(parsers[0].1, bytes, 10_000).max(1.0);
            (20_000_000.0 / once) as u32
        };
        let mut times = vec![Vec::new(); parsers.len()];
        for _ in 0..rounds {
            for (i, (_, parse)) in parsers.iter().enumerate() {
                times[i].push(per_call(*parse, bytes, iterations));
            }
        }
        for ((parser, parse), times) in parsers.iter().zip(times) {
            let (count, size) = allocations(*parse, bytes);
            println!(
                "| {name} | {parser} | {:.1} | {count} ({size}) |",
                median(times)
            );
        }
    }
}

fn main() {
    let rounds = std::env::args()
        .nth(1)
        .and_then(|r| r.parse().ok())
        .unwrap_or(9);
    parity();
    timing(rounds);
}
