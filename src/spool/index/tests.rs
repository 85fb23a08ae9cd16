//! The queues per key: order, bounds, operators' holds, failed messages, those waiting for an
//! upstream.

use super::*;

fn key(k: &str) -> HeldKey {
    HeldKey {
        layer: "tenant".into(),
        key: k.into(),
    }
}

const BOUNDS: Bounds = Bounds {
    max_held: Some(3),
    share: None,
    max_bytes: 1000,
};

/// A report's: neither `max_held` nor a share.
const REPORT: Bounds = Bounds {
    max_held: None,
    share: None,
    max_bytes: 1000,
};

fn ids(taken: Vec<Ticket>) -> Vec<String> {
    taken.into_iter().map(|t| t.id.to_string()).collect()
}

/// A key's messages go in the order they came, one at a time until its width is set; one
/// being written holds back those behind it; another key's go beside them, oldest first.
#[test]
fn a_key_releases_in_arrival_order_up_to_its_width() {
    let mut index = Index::default();
    for id in ["a1", "a2", "a3"] {
        index.reserve(&key("a"), id, 10, 0, BOUNDS).unwrap();
    }
    index.reserve(&key("b"), "b1", 10, 0, BOUNDS).unwrap();
    // Written out of order: a2 is on disk before a1, and still waits behind it.
    index.written("a2", false, 5);
    assert!(index.take_due(100, 10).is_empty());
    index.written("a1", false, 5);
    index.written("a3", false, 5);
    index.written("b1", false, 7);
    assert_eq!(ids(index.take_due(100, 10)), ["a1", "b1"]);
    assert!(index.take_due(100, 10).is_empty(), "a's width is 1");
    index.set_width(&key("a"), 2);
    assert_eq!(ids(index.take_due(100, 10)), ["a2"]);
    index.remove("a1");
    assert_eq!(ids(index.take_due(100, 10)), ["a3"]);
    index.remove("a2");
    index.remove("a3");
    assert!(!index.holds(&key("a")));
}

/// A message that failed for now steps aside until its time: the key's others go on, in
/// order, and it goes again among them when its time comes (before the later ones).
#[test]
fn a_message_that_failed_for_now_steps_aside() {
    let mut index = Index::default();
    for id in ["a1", "a2", "a3", "a4"] {
        index.reserve(&key("a"), id, 10, 0, REPORT).unwrap();
        index.written(id, false, 0);
    }
    assert_eq!(ids(index.take_due(0, 10)), ["a1"]);
    index.retry("a1", 200, "452 4.2.2 mailbox full".into());
    assert_eq!(index.next_due(), Some(200));
    assert_eq!(ids(index.take_due(10, 10)), ["a2"], "a1 waits for its time");
    index.remove("a2");
    let again = index.take_due(200, 10);
    assert_eq!((&*again[0].id, again[0].attempt), ("a1", 2), "ahead of a3");
    index.set_width(&key("a"), 5);
    assert_eq!(ids(index.take_due(200, 10)), ["a3", "a4"]);
    assert_eq!(index.get("a1").unwrap().1.state, State::Releasing);
    assert_eq!(index.next_due(), None);
}

/// An operator's release lets a message waiting for its time go now; one whose time has
/// come waits for its key's earlier messages (refused).
#[test]
fn an_operators_release_moves_a_waiting_message_up() {
    let mut index = Index::default();
    for id in ["a1", "a2"] {
        index.reserve(&key("a"), id, 10, 0, REPORT).unwrap();
        index.written(id, false, 0);
    }
    assert_eq!(ids(index.take_due(0, 10)), ["a1"]);
    assert!(!index.now("a2", 0), "its time has come: it waits for a1");
    index.retry("a1", 1_000, "451 later".into());
    assert_eq!(ids(index.take_due(0, 10)), ["a2"]);
    assert!(index.now("a1", 5));
    index.remove("a2");
    assert_eq!(ids(index.take_due(5, 10)), ["a1"]);
}

/// A key takes at most its share of the spool's bytes, alone in the spool or not (a key that
/// filled an empty spool would leave nothing for the next); a report passes the share.
#[test]
fn a_key_takes_at_most_its_share() {
    let bounds = Bounds {
        max_held: None,
        share: Some(500),
        max_bytes: 1000,
    };
    let mut index = Index::default();
    // Alone in the spool: still its share, no more.
    for id in ["a1", "a2"] {
        index.reserve(&key("a"), id, 200, 0, bounds).unwrap();
    }
    assert_eq!(
        index.reserve(&key("a"), "a3", 200, 0, bounds),
        Err(Refusal::OverShare {
            bytes: 400,
            share: 500
        })
    );
    index.reserve(&key("b"), "b1", 100, 0, bounds).unwrap();
    index.reserve(&key("a"), "a3", 100, 0, bounds).unwrap();
    index.reserve(&key("a"), "r", 100, 0, REPORT).unwrap();
    assert_eq!(index.totals(), (5, 0, 700));
    // A failed message still counts for its key.
    index.failed("a3", "550 no".into());
    assert!(matches!(
        index.reserve(&key("a"), "a4", 10, 0, bounds),
        Err(Refusal::OverShare { bytes: 600, .. })
    ));
    // A full spool is the spool's refusal, whoever asks.
    index.reserve(&key("b"), "b2", 300, 0, bounds).unwrap();
    assert!(matches!(
        index.reserve(&key("b"), "b3", 10, 0, bounds),
        Err(Refusal::Storage(_))
    ));
}

#[test]
fn bounds_refuse_past_max_held_and_max_bytes() {
    let mut index = Index::default();
    for id in ["1", "2", "3"] {
        index.reserve(&key("a"), id, 100, 0, BOUNDS).unwrap();
    }
    assert_eq!(
        index.reserve(&key("a"), "4", 100, 0, BOUNDS),
        Err(Refusal::KeyFull { held: 3 })
    );
    assert_eq!(
        index.reserve(&key("b"), "5", 701, 0, BOUNDS),
        Err(Refusal::Storage(Storage::MaxBytes { max: 1000 }))
    );
    // A report passes max_held (`None`), not max_bytes.
    index.reserve(&key("a"), "r", 100, 0, REPORT).unwrap();
    assert_eq!(index.totals(), (4, 0, 400));
    // A write that failed gives its room back.
    index.remove("r");
    assert_eq!(index.totals(), (3, 0, 300));
}

#[test]
fn a_stopped_key_is_not_released_until_let_go() {
    let mut index = Index::default();
    index.reserve(&key("a"), "1", 1, 0, BOUNDS).unwrap();
    index.written("1", false, 0);
    index.stop(&key("a"), true, 0);
    assert!(index.take_due(10, 10).is_empty());
    index.stop(&key("a"), false, 10);
    assert_eq!(index.take_due(10, 10).len(), 1);
}

#[test]
fn a_failed_message_is_kept_apart_and_counted() {
    let mut index = Index::default();
    index.reserve(&key("a"), "1", 5, 1_000, BOUNDS).unwrap();
    index.written("1", false, 0);
    index.take_due(0, 1);
    index.failed("1", "550 no".into());
    assert!(!index.holds(&key("a")), "new messages of the key go live");
    assert_eq!(index.totals(), (0, 1, 5));
    assert_eq!(index.get("1").unwrap().1.state, State::Failed);
    assert!(index.failed_before(1_000).is_empty());
    assert_eq!(index.failed_before(1_001).len(), 1);
}

/// A failed message put back goes in its place by arrival, ahead of later ones, but never
/// ahead of a head being released; its bytes are counted once throughout.
#[test]
fn a_requeued_message_takes_its_place_by_arrival() {
    let mut index = Index::default();
    for id in ["a1", "a2", "a3"] {
        index.reserve(&key("a"), id, 10, 0, REPORT).unwrap();
        index.written(id, false, 0);
    }
    let first = index.take_due(0, 10);
    assert_eq!(&*first[0].id, "a1");
    index.failed("a1", "550 gone".into());
    assert_eq!(index.totals(), (2, 1, 30));
    let (k, entry) = index.take_failed("a1").unwrap();
    assert_eq!(index.totals(), (2, 0, 20));
    index.requeue(&k, entry, 50);
    assert_eq!(index.totals(), (3, 0, 30));
    let again = index.take_due(50, 10);
    assert_eq!((&*again[0].id, again[0].attempt), ("a1", 1), "ahead of a2");
    // a2 with upstream now: a1, failed again and put back, waits behind it.
    index.failed("a1", "550 gone".into());
    let taken = index.take_due(60, 10);
    assert_eq!(&*taken[0].id, "a2");
    let (k, entry) = index.take_failed("a1").unwrap();
    index.requeue(&k, entry, 60);
    assert!(
        index.take_due(100, 10).is_empty(),
        "a2 is still with upstream"
    );
    index.remove("a2");
    assert_eq!(&*index.take_due(100, 10)[0].id, "a1");
}

/// Messages kept back by a failing upstream go as soon as it answers, whatever their backoff:
/// one of them to probe it, or all; another upstream's, and one deferred for its own reason,
/// keep theirs.
#[test]
fn messages_waiting_for_an_upstream_are_due_when_it_answers() {
    let mut index = Index::default();
    for (k, id) in [("a", "a1"), ("b", "b1"), ("c", "c1"), ("d", "d1")] {
        index.reserve(&key(k), id, 10, 0, BOUNDS).unwrap();
        index.written(id, false, 0);
    }
    assert_eq!(index.take_due(0, 10).len(), 4);
    index.wait_for("a1", 1000, "451 4.4.1".into(), "ses");
    index.wait_for("b1", 1000, "451 4.4.1".into(), "ses");
    index.wait_for("c1", 1000, "451 4.4.1".into(), "smtp");
    index.retry("d1", 1000, "452 4.2.2 mailbox full".into());
    assert_eq!(index.waiting_for("ses"), 2);
    assert_eq!(index.upstream_back("ses", 10, 1), 1, "one, to probe it");
    let probe: Vec<_> = index.take_due(10, 10).into_iter().map(|t| t.id).collect();
    assert_eq!(probe, ["a1".into()] as [Box<str>; 1]);
    assert_eq!(index.upstream_back("ses", 20, usize::MAX), 1);
    let rest: Vec<_> = index.take_due(20, 10).into_iter().map(|t| t.id).collect();
    assert_eq!(
        rest,
        ["b1".into()] as [Box<str>; 1],
        "c1 and d1 keep their backoff"
    );
    assert_eq!(
        (index.waiting_for("ses"), index.waiting_for("smtp")),
        (0, 1)
    );
}
