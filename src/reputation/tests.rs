//! The guard as a whole, on a fake clock: events in, verdicts and suppressions out.

use std::sync::Arc;
use std::time::Duration;

use super::events::tests::bare;
use super::*;
use crate::clock::FakeClock;
use crate::config::Config;

/// 2026-12-01T00:00:00Z.
const DEC_1: u64 = 1_796_083_200;

fn guard(extra: &str) -> (Reputation, Arc<FakeClock>) {
    let text = format!(
        "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://o\"\n\
         [reputation]\nkey = \"auth\"\nmin_messages = 20\nmin_bounces = 1\nmin_complaints = 1\n{extra}"
    );
    let config = Config::parse(&text).unwrap();
    let clock = Arc::new(FakeClock::new(DEC_1));
    (
        Reputation::new(config.reputation.as_ref().unwrap(), clock.clone()),
        clock,
    )
}

fn bounce(id: &str, feedback: &str) -> String {
    bare("Bounce", "Permanent", id, feedback)
}

#[tokio::test]
async fn dates_are_civil_utc() {
    assert_eq!(date_of(0), "1970-01-01");
    assert_eq!(date_of(DEC_1), "2026-12-01");
    assert_eq!(date_of(951_782_400), "2000-02-29");
}

#[tokio::test]
async fn bounces_of_a_tenants_messages_pause_it() {
    let (r, _) = guard("");
    for i in 0..40 {
        r.forwarded("acme", Some(&format!("m{i}")), 1).await;
    }
    r.forwarded("other", Some("o1"), 1).await;
    for i in 0..2 {
        let applied = r
            .apply_text(&bounce(&format!("m{i}"), &format!("f{i}")))
            .await
            .unwrap();
        assert!(
            matches!(
                applied,
                Applied::Counted {
                    change: Change::None,
                    ..
                }
            ),
            "{i}"
        );
    }
    assert_eq!(
        r.standing("acme").await,
        None,
        "2 of 40 is 5 %, not past it"
    );
    let applied = r.apply_text(&bounce("m2", "f2")).await.unwrap();
    let Applied::Counted {
        tenant,
        change,
        breach,
        ..
    } = applied
    else {
        panic!()
    };
    assert_eq!((tenant.as_deref(), change), (Some("acme"), Change::Paused));
    let b = r.standing("acme").await.unwrap();
    assert_eq!((b.kind, b.sent), (Kind::Bounce, 40));
    assert_eq!(breach.map(|b| b.sent), Some(40));
    assert_eq!(r.standing("other").await, None);
    assert_eq!(r.paused(), 1);
    let s = r.suppressed("GONE@example.com").await.unwrap();
    assert_eq!(
        (s.reason_text(), s.date.as_str()),
        ("hard bounce", "2026-12-01")
    );
}

#[tokio::test]
async fn an_unknown_message_is_unattributed_and_pauses_nobody() {
    let (r, _) = guard("");
    r.forwarded("acme", Some("known"), 20).await;
    for i in 0..30 {
        let applied = r
            .apply_text(&bounce("unknown", &format!("f{i}")))
            .await
            .unwrap();
        assert!(matches!(applied, Applied::Counted { tenant: None, .. }));
    }
    assert_eq!(r.unattributed(), 30);
    assert_eq!(r.standing("acme").await, None);
    assert_eq!(r.paused(), 0);
    assert!(
        r.suppressed("gone@example.com").await.is_some(),
        "suppression is account-wide"
    );
}

#[tokio::test]
async fn the_same_feedback_twice_counts_once() {
    let (r, _) = guard("");
    r.forwarded("acme", Some("m1"), 20).await;
    assert!(matches!(
        r.apply_text(&bounce("m1", "f1")).await.unwrap(),
        Applied::Counted { .. }
    ));
    assert_eq!(
        r.apply_text(&bounce("m1", "f1")).await.unwrap(),
        Applied::Repeat(Kind::Bounce)
    );
    assert_eq!(r.standings().await.unwrap()[0].bounces, 1);
}

/// A client may write the tag itself: it never overrides what the relay recorded, and only
/// names the tenant of a message the relay has no record of.
#[tokio::test]
async fn the_relays_record_wins_over_the_tenant_tag_which_fills_in_without_one() {
    let (r, _) = guard("");
    r.forwarded("acme", Some("m1"), 20).await;
    let tagged = |id: &str, feedback: &str| {
        bounce(id, feedback).replace(
            r#""ses:configuration-set":["c"]"#,
            r#""mailsluice-tenant":["beta"]"#,
        )
    };
    let Applied::Counted { tenant, .. } = r.apply_text(&tagged("m1", "f1")).await.unwrap() else {
        panic!()
    };
    assert_eq!(tenant.as_deref(), Some("acme"));
    let Applied::Counted { tenant, .. } = r.apply_text(&tagged("m2", "f2")).await.unwrap() else {
        panic!()
    };
    assert_eq!(tenant.as_deref(), Some("beta"));
}

#[tokio::test]
async fn complaints_suppress_with_their_reason_and_suppress_off_keeps_addresses() {
    let (r, _) = guard("");
    r.apply_text(&bare("Complaint", "", "m", "c1"))
        .await
        .unwrap();
    let s = r.suppressed("angry@example.com").await.unwrap();
    assert_eq!(
        (s.reason_text(), s.date.as_str()),
        ("complaint", "2026-12-02")
    );
    assert!(r.unsuppress("Angry@Example.com").await.unwrap());
    assert!(r.suppressed("angry@example.com").await.is_none());
    let (off, _) = guard("suppress = false\n");
    off.apply_text(&bounce("m", "f")).await.unwrap();
    assert!(off.suppressed("gone@example.com").await.is_none());
}

#[tokio::test]
async fn the_window_slides_on_the_clock_and_an_operator_resumes() {
    let (r, clock) = guard("");
    r.forwarded("acme", Some("m0"), 40).await;
    for i in 0..6 {
        r.apply_text(&bounce("m0", &format!("f{i}"))).await.unwrap();
    }
    assert!(r.standing("acme").await.is_some());
    clock.advance(Duration::from_secs(12 * 3600));
    r.forwarded("acme", None, 40).await;
    assert!(r.standing("acme").await.is_some(), "6 of 80 is still 7.5 %");
    clock.advance(Duration::from_secs(12 * 3600));
    assert_eq!(
        r.standing("acme").await,
        None,
        "the bounces left the window"
    );
    // An event for a message older than the window is unattributed.
    r.apply_text(&bounce("m0", "late")).await.unwrap();
    assert_eq!(r.unattributed(), 1);
    r.forwarded("beta", Some("b"), 20).await;
    for i in 0..20 {
        r.apply_text(&bounce("b", &format!("g{i}"))).await.unwrap();
    }
    assert!(r.standing("beta").await.is_some());
    assert!(r.resume("beta").await.unwrap());
    assert_eq!(r.standing("beta").await, None);
    assert!(!r.resume("nobody").await.unwrap());
}

#[tokio::test]
async fn a_suppression_ends_after_its_ttl() {
    let (r, clock) = guard("suppress_ttl_ms = 1000\n");
    r.apply_text(&bounce("m", "f")).await.unwrap();
    clock.advance(Duration::from_millis(999));
    assert!(r.suppressed("gone@example.com").await.is_some());
    clock.advance(Duration::from_millis(1));
    assert!(r.suppressed("gone@example.com").await.is_none());
    assert_eq!(r.suppressed_count().await.unwrap(), 0);
}

#[tokio::test]
async fn upstreams_own_refusal_counts_as_a_hard_bounce() {
    let (r, _) = guard("");
    r.forwarded("acme", None, 18).await;
    r.refused_by_upstream("acme", &["nobody@example.com".into()])
        .await;
    assert_eq!(
        r.standing("acme").await,
        None,
        "1 of 19: under min_messages"
    );
    r.refused_by_upstream("acme", &["a@x".into(), "b@x".into()])
        .await;
    let b = r.standing("acme").await.unwrap();
    assert_eq!((b.kind, b.sent), (Kind::Bounce, 21));
    assert!(r.suppressed("nobody@example.com").await.is_some());
    assert!(
        r.suppressed("a@x").await.is_none(),
        "which of several was refused is unknown"
    );
}

#[tokio::test]
async fn a_burst_of_ten_thousand_events_stays_bounded_and_loses_nothing() {
    let (r, _) = guard("max_tracked_messages = 5000\n");
    for i in 0..5000 {
        r.forwarded(&format!("t{}", i % 50), Some(&format!("m{i}")), 1)
            .await;
    }
    for i in 0..10_000 {
        // Every message bounces twice, each with its own feedback id.
        let text = bounce(&format!("m{}", i % 5000), &format!("f{i}"));
        assert!(matches!(
            r.apply_text(&text).await.unwrap(),
            Applied::Counted {
                tenant: Some(_),
                ..
            }
        ));
    }
    let standings = r.standings().await.unwrap();
    assert_eq!(standings.len(), 50);
    assert_eq!(
        standings.iter().map(|s| s.bounces).sum::<u64>(),
        10_000,
        "none lost"
    );
    assert!(r.tracked().unwrap() <= 5000);
    // The bound holds: 5000 more messages push the first ones out.
    for i in 5000..10_000 {
        r.forwarded("t0", Some(&format!("m{i}")), 1).await;
    }
    assert_eq!(r.tracked().unwrap(), 5000);
    r.apply_text(&bounce("m0", "new")).await.unwrap();
    assert_eq!(r.unattributed(), 1);
}
