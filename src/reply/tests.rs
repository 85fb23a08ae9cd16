//! Reply texts in wire form, and the mapping of throttle refusals and upstream verdicts.

use super::*;
use crate::throttle::ThrottleError;
use crate::upstream::{Accepted, UpstreamError};

#[test]
fn multiline_replies_repeat_the_code_and_mark_continuations() {
    let r = Reply {
        code: 250,
        esc: "",
        lines: smallvec::smallvec!["a".into(), "b".into()],
    };
    let mut out = Vec::new();
    r.write_to(&mut out);
    assert_eq!(out, b"250-a\r\n250 b\r\n");
}

#[test]
fn crlf_inside_a_text_cannot_split_a_reply() {
    let mut out = Vec::new();
    Reply::raw(451, "x\r\n250 ok").write_to(&mut out);
    assert_eq!(out, b"451 x  250 ok\r\n");
}

#[test]
fn retry_hint_has_millisecond_precision() {
    assert_eq!(
        retry_after_text(Duration::from_millis(1250)),
        "retry after 1.250 s"
    );
    assert_eq!(
        retry_after_text(Duration::from_micros(10)),
        "retry after 0.001 s"
    );
}

fn wire(r: &Reply) -> String {
    let mut out = Vec::new();
    r.write_to(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn accepted_keeps_upstream_id() {
    let r = upstream_verdict(&Ok(Accepted::new("Ok 0100018c-abc")));
    assert_eq!(wire(&r), "250 2.0.0 Ok 0100018c-abc\r\n");
    let r = upstream_verdict(&Ok(Accepted::new("2.6.0 queued as 42")));
    assert_eq!(wire(&r), "250 2.6.0 queued as 42\r\n");
}

#[test]
fn rejections_keep_class_and_text() {
    let r = upstream_verdict(&Err(UpstreamError::Rejected {
        code: 554,
        enhanced: Some("5.7.1".into()),
        text: "Message rejected: Email address is not verified.".into(),
    }));
    assert_eq!(
        wire(&r),
        "554 5.7.1 upstream: Message rejected: Email address is not verified.\r\n"
    );
    let r = upstream_verdict(&Err(UpstreamError::Rejected {
        code: 421,
        enhanced: None,
        text: "closing".into(),
    }));
    assert!(wire(&r).starts_with("451 4.0.0 upstream: closing"));
}

#[test]
fn unavailable_is_451_4_4_1() {
    let r = upstream_verdict(&Err(UpstreamError::Unavailable("refused".into())));
    assert!(wire(&r).starts_with("451 4.4.1 "));
    let r = upstream_verdict(&Err(UpstreamError::Uncertain("timed out".into())));
    assert!(wire(&r).starts_with("451 4.4.1 "));
    assert!(wire(&r).contains("may have been delivered"), "{}", wire(&r));
}

#[test]
fn refused_credentials_are_451_4_7_0_and_keep_the_reason_out() {
    let r = upstream_verdict(&Err(UpstreamError::Credentials(
        "535 5.7.8 bad credentials".into(),
    )));
    assert!(
        wire(&r).starts_with("451 4.7.0 Upstream refused the relay's credentials"),
        "{}",
        wire(&r)
    );
    assert!(!wire(&r).contains("535"), "{}", wire(&r));
}

#[test]
fn throttle_refusals_have_their_codes() {
    let limited = ThrottleError::Limited {
        layer: "tenant".into(),
        key: "acme".into(),
        retry_after: Duration::from_millis(1250),
        reason: crate::throttle::LimitReason::MaxWait,
    };
    assert_eq!(
        wire(&throttle_refusal(&limited)),
        "451 4.7.1 Rate limit of layer tenant reached, retry after 1.250 s\r\n"
    );
    let over = ThrottleError::CostOverBurst {
        layer: "t".into(),
        cost: 20,
        burst: 10,
    };
    assert!(wire(&throttle_refusal(&over)).starts_with("554 5.5.3 "));
    assert!(wire(&throttle_refusal(&ThrottleError::Shutdown)).starts_with("421 4.3.2 "));
    let store = throttle_refusal(&ThrottleError::StoreUnavailable);
    assert!(wire(&store).starts_with("451 4.4.3 "));
}

#[test]
fn suppressed_reply_is_as_pinned() {
    use crate::reputation::{Kind, Suppression};
    let s = Suppression {
        reason: Kind::Bounce,
        date: "2026-12-01".into(),
    };
    assert_eq!(
        wire(&suppressed("gone@example.com", &s)),
        "550 5.1.1 <gone@example.com> suppressed: hard bounce on 2026-12-01\r\n"
    );
}

#[test]
fn upstreams_message_id_is_read_from_its_250() {
    let id = |text: &str| Accepted::new(text).message_id().map(str::to_string);
    assert_eq!(
        id("Ok 0100018c-abc-000000").as_deref(),
        Some("0100018c-abc-000000")
    );
    assert_eq!(id("2.0.0 Ok 0100018c-abc").as_deref(), Some("0100018c-abc"));
    assert_eq!(id("2.0.0 Ok: queued as 42"), None);
    assert_eq!(id("queued"), None);
    assert_eq!(id("Ok queued as mem-1"), None);
    assert_eq!(id(&format!("Ok {}", "x".repeat(300))), None);
}

#[test]
fn the_id_a_250_names_is_sess_or_a_smarthosts_queued_as() {
    let id = |text: &str| Accepted::new(text).named_id().map(str::to_string);
    assert_eq!(
        id("2.0.0 Ok 0102019a-x-000000").as_deref(),
        Some("0102019a-x-000000")
    );
    assert_eq!(
        id("2.0.0 Ok: queued as 4Xyz12AbC").as_deref(),
        Some("4Xyz12AbC")
    );
    assert_eq!(
        id("OK id=1uQ3ab-000123-Ab queued as 1uQ3ab-000123-Ab.").as_deref(),
        Some("1uQ3ab-000123-Ab")
    );
    assert_eq!(id("2.0.0 Ok"), None);
    assert_eq!(id("2.6.0 queued as "), None);
}
