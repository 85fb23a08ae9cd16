//! The fault matrix: every upstream behaviour crossed with every client behaviour,
//! through the relay over real TCP, each case on its own relay and test upstream. For each,
//! the client gets the right answer and the invariant (`support::invariant`) holds: a `250`
//! only for a message upstream accepted exactly once, nothing upstream that was refused,
//! abandoned or never finished.
//!
//! Every case runs twice: against an upstream that advertises PIPELINING (MAIL, RCPT and
//! DATA go in one flight) and against one that does not (one command at a time).
//!
//! The relay's upstream timeout is 1 s here, so a stall "past the timeout" is 2 s and a
//! slow acceptance 200 ms (margins wide enough for a loaded machine); the cases of one client
//! behaviour run concurrently.

use std::sync::Arc;
use std::time::Duration;

use crate::support::config::TestConfig;
use crate::support::invariant::{self, assert_holds, is_uncertain, settle, ClientLog, Seen};
use crate::support::relay::{upstream_relay, Relay};
use crate::support::traffic::{self, Leave};
use crate::support::upstream::{Fault, Step, TestUpstream};

/// What upstream does to the message under test.
#[derive(Clone, Debug)]
enum Upstream {
    /// Nothing listens: connections are refused.
    Refuses,
    /// This fault on every connection.
    Fault(Fault),
    /// A first message leaves a connection in the pool, then upstream closes it while idle
    /// (writing this notice first, when given); the message under test comes after.
    IdleClosed(Option<&'static str>),
    /// As `IdleClosed`, and then upstream stops listening too.
    IdleClosedThenDown,
}

/// What the client must be told, and whether upstream then has the message.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Accepted,
    /// This code, and a text that starts with this enhanced code.
    Refused(u16, &'static str),
    /// `451 4.4.1 ... may have been delivered`; upstream has it or not, as given.
    Uncertain {
        delivered: bool,
    },
}

impl Expect {
    fn delivered(self) -> bool {
        match self {
            Expect::Accepted => true,
            Expect::Refused(..) => false,
            Expect::Uncertain { delivered } => delivered,
        }
    }

    fn matches(self, seen: &Seen) -> bool {
        match (self, seen) {
            (Expect::Accepted, Seen::Reply(250, _)) => true,
            (Expect::Refused(code, esc), Seen::Reply(c, text)) => {
                *c == code && text.starts_with(esc)
            }
            (Expect::Uncertain { .. }, Seen::Reply(c, text)) => is_uncertain(*c, text),
            _ => false,
        }
    }
}

struct Row {
    name: &'static str,
    upstream: Upstream,
    expect: Expect,
}

const PAST_TIMEOUT: Duration = Duration::from_millis(2000);
const SLOWLY: Duration = Duration::from_millis(200);

fn rows() -> Vec<Row> {
    let row = |name, upstream, expect| Row {
        name,
        upstream,
        expect,
    };
    let fault = Upstream::Fault;
    let stall = |step| fault(Fault::stall(step, PAST_TIMEOUT));
    let temp = |step| fault(Fault::reply(step, 451, "4.3.0 try again later"));
    let perm = |step| fault(Fault::reply(step, 550, "5.7.1 refused"));
    let t = Expect::Refused(451, "4.3.0");
    let p = Expect::Refused(550, "5.7.1");
    let unavailable = Expect::Refused(451, "4.4.1");
    vec![
        row("refuses connections", Upstream::Refuses, unavailable),
        row("closes at once", fault(Fault::CloseOnConnect), unavailable),
        row(
            "421 at greeting",
            fault(Fault::reply(Step::Greeting, 421, "4.3.2 too busy")),
            Expect::Refused(451, "4.3.2"),
        ),
        row("4xx at MAIL", temp(Step::Mail), t),
        row("5xx at MAIL", perm(Step::Mail), p),
        row("4xx at RCPT", temp(Step::Rcpt), t),
        row("5xx at RCPT", perm(Step::Rcpt), p),
        row("4xx at DATA", temp(Step::Data), t),
        row("5xx at DATA", perm(Step::Data), p),
        row("4xx at end of data", temp(Step::EndOfData), t),
        row("5xx at end of data", perm(Step::EndOfData), p),
        row(
            "drops mid-DATA",
            fault(Fault::DropMidData),
            Expect::Uncertain { delivered: false },
        ),
        row("stalls at greeting", stall(Step::Greeting), unavailable),
        row("stalls at MAIL", stall(Step::Mail), unavailable),
        row("stalls at RCPT", stall(Step::Rcpt), unavailable),
        row("stalls at DATA", stall(Step::Data), unavailable),
        // The one ambiguity: the message went whole, its answer comes after we gave up.
        row(
            "stalls at end of data, then accepts",
            stall(Step::EndOfData),
            Expect::Uncertain { delivered: true },
        ),
        row(
            "greets slowly",
            fault(Fault::stall(Step::Greeting, SLOWLY)),
            Expect::Accepted,
        ),
        row(
            "accepts slowly",
            fault(Fault::stall(Step::EndOfData, SLOWLY)),
            Expect::Accepted,
        ),
        row(
            "pooled connection closed while idle",
            Upstream::IdleClosed(None),
            Expect::Accepted,
        ),
        row(
            "pooled connection closed while idle, with a 421",
            Upstream::IdleClosed(Some("421 4.4.2 idle timeout")),
            Expect::Accepted,
        ),
        row(
            "pooled connection closed while idle, upstream then down",
            Upstream::IdleClosedThenDown,
            unavailable,
        ),
    ]
}

/// How the client under test behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    /// Sends and reads the final reply.
    Stays,
    /// Closes the connection halfway through the message.
    LeavesDuringData,
    /// Waits in the throttle queue behind another message of its tenant, then leaves.
    LeavesWhileWaiting,
    /// Closes the connection right after the final dot.
    LeavesBeforeReply,
}

/// One layer: a tenant gets one message a minute, and keeps the token even when upstream
/// fails (`charge_failures`), so a second message of the same tenant always waits.
fn config(upstream_url: &str) -> String {
    TestConfig::new()
        .smtp("shutdown_grace_ms = 10000")
        .upstream(upstream_url)
        .then("tls = \"none\"\ntimeout_ms = 1000\npool_size = 4")
        .then(
            "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
             limit = 1\ninterval_ms = 60000\nburst = 1\nmax_wait_ms = 120000\ncharge_failures = true",
        )
        .text()
}

async fn start_relay(up: &TestUpstream) -> Relay {
    upstream_relay(&config(&up.url())).await
}

/// A test upstream, advertising PIPELINING or not.
async fn start_upstream(pipelining: bool) -> TestUpstream {
    let up = TestUpstream::start().await;
    if !pipelining {
        up.without_pipelining();
    }
    up
}

/// Lets the relay work until `cond` holds (checked every 5 ms, for at most 20 s).
async fn until(what: &str, cond: impl Fn() -> bool) -> Result<(), String> {
    for _ in 0..4000 {
        if cond() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err(format!("never happened: {what}"))
}

/// One case: a fresh upstream and relay, the upstream behaviour set up, the client behaviour
/// played, then the answers and the invariant checked.
async fn case(row: &Row, client: Client, pipelining: bool) -> Result<(), String> {
    let up = start_upstream(pipelining).await;
    let relay = start_relay(&up).await;
    let addr = relay.addr;
    let log = ClientLog::new();
    match &row.upstream {
        Upstream::Refuses => up.stop_listening().await,
        Upstream::Fault(fault) => up.set_fault(fault.clone()),
        Upstream::IdleClosed(notice) => {
            let warm = traffic::send(addr, &log, "warm", "warm", Leave::Never).await;
            if warm.code() != Some(250) {
                return Err(format!("warm-up message: {warm:?}"));
            }
            up.close_idle_connections(*notice).await;
        }
        Upstream::IdleClosedThenDown => {
            let warm = traffic::send(addr, &log, "warm", "warm", Leave::Never).await;
            if warm.code() != Some(250) {
                return Err(format!("warm-up message: {warm:?}"));
            }
            up.close_idle_connections(None).await;
            up.stop_listening().await;
        }
    }
    let expect = row.expect;
    // The message under test, and whether upstream must end up with it.
    let (id, delivered) = match client {
        Client::Stays => {
            let seen = traffic::send(addr, &log, "m", "t-m", Leave::Never).await;
            if !expect.matches(&seen) {
                return Err(format!("expected {expect:?}, the client saw {seen:?}"));
            }
            ("m", Some(expect.delivered()))
        }
        Client::LeavesDuringData => {
            let seen = traffic::send(addr, &log, "m", "t-m", Leave::DuringData).await;
            if seen != Seen::Unsent {
                return Err(format!("left during DATA, yet saw {seen:?}"));
            }
            ("m", Some(false))
        }
        Client::LeavesBeforeReply => {
            // The relay does not watch a client whose message may go at once: it forwards,
            // and upstream's verdict is what it would have been.
            let done = relay.messages_done();
            let seen = traffic::send(addr, &log, "m", "t-m", Leave::AfterDot).await;
            if seen != Seen::NoReply {
                return Err(format!("left after the dot, yet saw {seen:?}"));
            }
            // Stopping the relay before it read the dot would answer it 421 (shutdown).
            until("the relay is done with the message", || {
                relay.messages_done() > done
            })
            .await?;
            ("m", Some(expect.delivered()))
        }
        Client::LeavesWhileWaiting => {
            // The first message of tenant "shared" takes its one token; the second waits.
            let first = traffic::send(addr, &log, "first", "shared", Leave::Never).await;
            if !expect.matches(&first) {
                return Err(format!("first: expected {expect:?}, saw {first:?}"));
            }
            let rcpts = [traffic::rcpt()];
            let sent = traffic::send_to_dot(addr, "waiter", "shared", &rcpts, Leave::Never)
                .await
                .map_err(|seen| format!("waiter: {seen:?}"))?;
            let throttle = relay.throttle.clone();
            until("the waiter is queued", || throttle.waiting(0) == 1).await?;
            log.record("waiter", sent.leave());
            until("the waiter left the queue", || throttle.waiting(0) == 0).await?;
            ("waiter", Some(false))
        }
    };
    relay.stop().await;
    settle(&up).await;
    check_flights(&up, pipelining)?;
    let summary = invariant::check(&log.entries(), &invariant::upstream_ids(&up))?;
    let has = invariant::upstream_ids(&up)
        .iter()
        .any(|i| i.as_deref() == Some(id));
    if let Some(want) = delivered {
        if has != want {
            return Err(format!(
                "upstream {} {id}: {summary:?}",
                if has { "has" } else { "lacks" }
            ));
        }
    }
    Ok(())
}

/// The relay pipelined exactly when upstream offered it: each MAIL came with its RCPT and
/// DATA in one flight, or alone.
fn check_flights(up: &TestUpstream, pipelining: bool) -> Result<(), String> {
    let flights = up.flights();
    let mails = flights.iter().filter(|(_, f)| f[0].starts_with("MAIL"));
    for (_, flight) in mails {
        if (flight.len() > 1) != pipelining {
            return Err(format!("pipelining {pipelining}, yet got {flight:?}"));
        }
    }
    Ok(())
}

/// Every row for one client behaviour, with and without PIPELINING, concurrently; all
/// failures reported together.
async fn matrix(client: Client) {
    let mut tasks = tokio::task::JoinSet::new();
    for pipelining in [true, false] {
        for row in rows() {
            let row = Arc::new(row);
            tasks.spawn(async move {
                let result = case(&row, client, pipelining).await;
                let upstream = if pipelining {
                    "PIPELINING"
                } else {
                    "no PIPELINING"
                };
                (format!("{} ({upstream})", row.name), result)
            });
        }
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    while let Some(done) = tasks.join_next().await {
        ran += 1;
        match done {
            Ok((_, Ok(()))) => {}
            Ok((name, Err(e))) => failures.push(format!("{name}: {e}")),
            Err(e) => failures.push(format!("a case panicked: {e}")),
        }
    }
    assert_eq!(ran, 2 * rows().len());
    assert!(
        failures.is_empty(),
        "{client:?}: {} of {ran} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_checker_catches_each_kind_of_violation() {
    invariant::self_test();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_stays_gets_the_right_answer() {
    matrix(Client::Stays).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_leaves_during_data_sends_nothing() {
    matrix(Client::LeavesDuringData).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_leaves_while_waiting_sends_nothing() {
    matrix(Client::LeavesWhileWaiting).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_that_leaves_before_the_reply_gets_upstreams_verdict_anyway() {
    matrix(Client::LeavesBeforeReply).await;
}

/// Many messages through an upstream that fails one transaction (and one connection) in
/// four, in every way in turn, from eight clients at once, one message in ten left during
/// DATA and one in ten right after its dot: every answer is one the faults explain, and the
/// invariant holds over all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_faults_and_clients_keep_the_invariant() {
    mixed(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_faults_and_clients_keep_the_invariant_without_pipelining() {
    mixed(false).await;
}

async fn mixed(pipelining: bool) {
    let up = start_upstream(pipelining).await;
    up.set_fault_mix(
        4,
        vec![
            Fault::CloseOnConnect,
            Fault::reply(Step::Greeting, 421, "4.3.2 too busy"),
            Fault::reply(Step::Mail, 451, "4.3.0 later"),
            Fault::reply(Step::Rcpt, 550, "5.1.1 no such user"),
            Fault::reply(Step::EndOfData, 452, "4.3.1 full"),
            Fault::DropMidData,
            Fault::stall(Step::EndOfData, PAST_TIMEOUT),
            Fault::stall(Step::Rcpt, PAST_TIMEOUT),
        ],
    );
    let relay = start_relay(&up).await;
    let log = ClientLog::new();
    let mut tasks = tokio::task::JoinSet::new();
    for sender in 0..8 {
        let (addr, log) = (relay.addr, log.clone());
        tasks.spawn(async move {
            for n in 0..25 {
                let i = sender * 25 + n;
                let leave = match i % 10 {
                    0 => Leave::DuringData,
                    1 => Leave::AfterDot,
                    _ => Leave::Never,
                };
                let id = format!("m{i}");
                traffic::send(addr, &log, &id, &id, leave).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    relay.stop().await;
    settle(&up).await;
    check_flights(&up, pipelining).unwrap();
    let summary = assert_holds("mixed", &log, &up);
    assert_eq!(log.len(), 200);
    let explained = |code: u16, text: &str| match code {
        250 => true,
        451 => {
            text.starts_with("4.3.0 upstream: later")
                || text.starts_with("4.3.2 upstream: too busy")
                || text.starts_with("4.4.1 ")
        }
        550 => text.starts_with("5.1.1 upstream: no such user"),
        452 => text.starts_with("4.3.1 upstream: full"),
        _ => false,
    };
    for (id, seen) in log.entries() {
        if let Seen::Reply(code, text) = &seen {
            assert!(explained(*code, text), "{id}: {code} {text}");
        }
    }
    eprintln!("{summary:?}");
    assert!(
        summary.acknowledged > 0 && summary.refused > 0,
        "{summary:?}"
    );
    assert!(summary.uncertain > 0, "{summary:?}");
    assert_eq!((summary.unsent, summary.no_reply), (20, 20), "{summary:?}");
}
