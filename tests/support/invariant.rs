//! The promise every reliability test checks, written once: mailsluice never loses a message
//! and never acknowledges one that upstream did not accept.
//!
//! Each test message carries a unique id in a header ([`ID_HEADER`]). The client side keeps a
//! [`ClientLog`]: for every attempt, what the client saw at the end ([`Seen`]). The upstream
//! side is the list of ids upstream accepted (a [`TestUpstream`]'s messages). [`check`] holds
//! one against the other:
//!
//! 1. every `250` a client received is a message upstream accepted exactly once;
//! 2. every message upstream accepted was answered `250`, unless no answer reached the client
//!    (it went away, or the connection broke after its final dot) or the relay said it could
//!    not know ([`is_uncertain`]: upstream fell silent after the whole message was sent, the
//!    one ambiguity SMTP leaves a relay, RFC 1047);
//! 3. nothing else reaches upstream: no id twice, no id no client sent, nothing a client was
//!    refused or never finished sending.
//!
//! An id may be attempted several times (an MTA retrying after a `451`): it is then one
//! message, which must reach upstream at most once, and exactly once if any attempt got `250`.
//!
//! Call [`settle`] before checking: a stalled upstream records a message only when its stall
//! ends, and the check must see the final state.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::upstream::TestUpstream;

/// The header that carries a test message's id.
pub const ID_HEADER: &str = "X-Sluice-Id";

/// What a client saw of one attempt to send a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The reply to the final dot.
    Reply(u16, String),
    /// The final dot was sent and no reply was read: the client went away first, or the
    /// connection broke. Upstream may have the message, or not.
    NoReply,
    /// The final dot was never sent (refused before it, or the client left during DATA):
    /// upstream must not have the message.
    Unsent,
}

impl Seen {
    pub fn code(&self) -> Option<u16> {
        match self {
            Seen::Reply(code, _) => Some(*code),
            _ => None,
        }
    }
}

/// The relay's `451` for a message sent whole whose answer never came from upstream: it may
/// have been delivered (`reply::upstream_uncertain`).
pub fn is_uncertain(code: u16, text: &str) -> bool {
    code == 451 && text.contains("may have been delivered")
}

/// What the clients saw, in the order they saw it; shared by the tasks of a test.
#[derive(Clone, Default)]
pub struct ClientLog {
    entries: Arc<Mutex<Vec<(String, Seen)>>>,
}

impl ClientLog {
    pub fn new() -> ClientLog {
        ClientLog::default()
    }

    pub fn record(&self, id: &str, seen: Seen) {
        self.entries.lock().unwrap().push((id.to_string(), seen));
    }

    pub fn entries(&self) -> Vec<(String, Seen)> {
        self.entries.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.lock().unwrap().is_empty()
    }
}

/// A small message with `id` in its header (and in its `Message-ID`, which MTAs log),
/// `X-Tenant: tenant`.
pub fn message(id: &str, tenant: &str) -> Vec<u8> {
    format!(
        "{ID_HEADER}: {id}\r\nMessage-ID: <{id}@sluice.test>\r\nX-Tenant: {tenant}\r\n\
         Subject: test {id}\r\n\r\nbody of {id}\r\n"
    )
    .into_bytes()
}

/// The id header's value in a message as upstream received it.
pub fn id_of(data: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(data);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    head.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case(ID_HEADER)
            .then(|| value.trim().to_string())
    })
}

/// The ids of the messages upstream accepted, in order (`None` for one without an id).
pub fn upstream_ids(up: &TestUpstream) -> Vec<Option<String>> {
    up.messages().iter().map(|m| id_of(&m.data)).collect()
}

/// Counts of what the check found, for tests to assert the outcome they expect.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Messages (ids) whose client got `250`.
    pub acknowledged: usize,
    /// Messages refused with a 4xx or 5xx (other than uncertain), not delivered.
    pub refused: usize,
    /// Messages answered "may have been delivered", and how many of them upstream has.
    pub uncertain: usize,
    pub uncertain_delivered: usize,
    /// Messages sent whole with no reply read, and how many of them upstream has.
    pub no_reply: usize,
    pub no_reply_delivered: usize,
    /// Messages never sent whole.
    pub unsent: usize,
    /// Messages upstream accepted.
    pub upstream: usize,
    /// Reply codes seen at the final dot, over all attempts.
    pub codes: BTreeMap<u16, usize>,
}

/// Holds the client log against the ids upstream accepted; every violation is listed.
pub fn check(client: &[(String, Seen)], upstream: &[Option<String>]) -> Result<Summary, String> {
    let mut problems = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, id) in upstream.iter().enumerate() {
        match id {
            Some(id) => *counts.entry(id.as_str()).or_default() += 1,
            None => problems.push(format!("upstream message #{i} carries no {ID_HEADER}")),
        }
    }
    let mut attempts: BTreeMap<&str, Vec<&Seen>> = BTreeMap::new();
    for (id, seen) in client {
        attempts.entry(id.as_str()).or_default().push(seen);
    }
    let mut s = Summary {
        upstream: upstream.len(),
        ..Summary::default()
    };
    for (id, n) in &counts {
        if *n > 1 {
            problems.push(format!("{id}: reached upstream {n} times"));
        }
        if !attempts.contains_key(id) {
            problems.push(format!("{id}: reached upstream but no client sent it"));
        }
    }
    for (id, seen) in &attempts {
        let n = counts.get(id).copied().unwrap_or(0);
        for s2 in seen {
            if let Seen::Reply(code, _) = s2 {
                *s.codes.entry(*code).or_default() += 1;
            }
        }
        let acked = seen.iter().any(|s| matches!(s, Seen::Reply(250, _)));
        let uncertain = seen
            .iter()
            .any(|s| matches!(s, Seen::Reply(c, t) if is_uncertain(*c, t)));
        let no_reply = seen.iter().any(|s| **s == Seen::NoReply);
        if acked {
            s.acknowledged += 1;
            if n != 1 {
                problems.push(format!(
                    "{id}: the client got 250 but upstream has it {n} times"
                ));
            }
        } else if uncertain || no_reply {
            if uncertain {
                s.uncertain += 1;
                s.uncertain_delivered += n.min(1);
            } else {
                s.no_reply += 1;
                s.no_reply_delivered += n.min(1);
            }
        } else {
            if seen.iter().all(|s| **s == Seen::Unsent) {
                s.unsent += 1;
            } else {
                s.refused += 1;
            }
            if n > 0 {
                let what: Vec<String> = seen.iter().map(|s| format!("{s:?}")).collect();
                problems.push(format!(
                    "{id}: upstream has it but the client saw {}",
                    what.join(", ")
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(s)
    } else {
        problems.truncate(20);
        Err(problems.join("\n"))
    }
}

/// [`check`] of `log` against `up`, panicking with every violation.
pub fn assert_holds(label: &str, log: &ClientLog, up: &TestUpstream) -> Summary {
    match check(&log.entries(), &upstream_ids(up)) {
        Ok(summary) => summary,
        Err(problems) => panic!("{label}: the invariant does not hold:\n{problems}"),
    }
}

/// Waits until upstream has no connection open (every stall over, every message it will
/// ever record recorded). Call it once nothing sends to it any more (the relay stopped).
pub async fn settle(up: &TestUpstream) {
    for _ in 0..3000 {
        if up.open_connections() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "test upstream: {} connections still open after 30 s",
        up.open_connections()
    );
}

/// The checker itself, on hand-made logs: each rule catches what it should.
pub fn self_test() {
    let ok = |id: &str| (id.to_string(), Seen::Reply(250, "2.0.0 ok".into()));
    let refused = |id: &str| (id.to_string(), Seen::Reply(451, "4.7.1 later".into()));
    let up =
        |ids: &[&str]| -> Vec<Option<String>> { ids.iter().map(|i| Some(i.to_string())).collect() };
    // All good: one acknowledged, one refused, one gone with its message delivered, one
    // uncertain not delivered, one retried after a 451 and then acknowledged.
    let log = vec![
        ok("a"),
        refused("b"),
        ("c".into(), Seen::NoReply),
        (
            "d".into(),
            Seen::Reply(451, "4.4.1 ... it may have been delivered".into()),
        ),
        refused("e"),
        ok("e"),
        ("f".into(), Seen::Unsent),
    ];
    let s = check(&log, &up(&["a", "c", "e"])).expect("holds");
    assert_eq!(
        (s.acknowledged, s.refused, s.no_reply, s.no_reply_delivered),
        (2, 1, 1, 1)
    );
    assert_eq!((s.uncertain, s.uncertain_delivered, s.unsent), (1, 0, 1));
    // A 250 missing upstream.
    assert!(check(&log, &up(&["c", "e"])).unwrap_err().contains("a:"));
    // A duplicate.
    assert!(check(&log, &up(&["a", "a", "e"]))
        .unwrap_err()
        .contains("2 times"));
    // Refused but delivered; unsent but delivered.
    assert!(check(&log, &up(&["a", "b", "e"])).is_err());
    assert!(check(&log, &up(&["a", "e", "f"])).is_err());
    // Unknown to every client.
    assert!(check(&log, &up(&["a", "e", "zzz"]))
        .unwrap_err()
        .contains("no client"));
    // No id at all.
    assert!(check(&log, &[Some("a".into()), Some("e".into()), None]).is_err());
}
