//! Fair share in the SMTP dialogue on tokio's paused clock (in-memory sessions, as in
//! `throttling.rs`): the measurement, an account layer and a per-tenant layer at 5/s,
//! tenant A sending 30 messages at once and tenant B one 0.5 s later.

use std::time::Duration;

use crate::support::memory::subject_of;
use crate::support::relay::memory_relay;
use crate::throttling::{send, until};
use tokio::time::Instant;

fn layers(fair: bool) -> String {
    let fair_by = if fair {
        "fair_by = \"header:X-Tenant\"\n"
    } else {
        ""
    };
    format!(
        "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\nlimit = 5\n{fair_by}\n\
         [[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\nlimit = 5\n"
    )
}

/// How long B's message waited, and the subjects upstream saw.
async fn measure(fair: bool) -> (Duration, Vec<String>) {
    let (relay, fwd) = memory_relay("", &layers(fair)).await;
    let mut a = Vec::new();
    for i in 0..30 {
        a.push(send(&relay, "a", &format!("a{i:02}")));
        let waiting = || relay.throttle.peek("account", "").unwrap().waiting;
        until("reached the throttle", || {
            fwd.messages().len() + waiting() == i + 1
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let (code, text) = send(&relay, "b", "b").await.unwrap();
    assert_eq!(code, 250, "{text}");
    let waited = Instant::now() - start;
    for c in a {
        assert_eq!(c.await.unwrap().0, 250);
    }
    relay.stop().await;
    (
        waited,
        fwd.messages().iter().map(|(_, m)| subject_of(m)).collect(),
    )
}

#[tokio::test(start_paused = true)]
async fn with_fair_by_the_other_tenant_waits_one_turn() {
    let (waited, subjects) = measure(true).await;
    assert!(waited <= Duration::from_millis(400), "B waited {waited:?}");
    let a: Vec<&String> = subjects.iter().filter(|s| s.starts_with('a')).collect();
    let expected: Vec<String> = (0..30).map(|i| format!("a{i:02}")).collect();
    assert_eq!(a, expected.iter().collect::<Vec<_>>(), "A's order kept");
}

#[tokio::test(start_paused = true)]
async fn without_fair_by_it_waits_behind_the_backlog() {
    let (waited, _) = measure(false).await;
    // The measurement: 4.7 s (25 waiting at 0.2 s, less the 0.5 s already served).
    assert_eq!(waited, Duration::from_millis(4_700));
}
