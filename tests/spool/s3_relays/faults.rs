//! S3 or SQS failing as a message is held: no `250`, `452 4.3.1` (docs/replies.md's hold-mode
//! row), and nothing of it left that can be sent: S3 down, nothing written; SQS down after
//! the object was written, the object deleted; SQS's answer lost after it enqueued the entry,
//! the entry dropped when received (its object gone), never sent.

use super::{is_held, mail, message_id, send_all, start};
use crate::support::aws_fault::Service;
use crate::support::process::RelayProcess;
use crate::support::relay::Client;
use crate::support::replies;
use crate::support::spool_s3::SpoolOnMoto;
use crate::support::upstream::{Fault, Step, TestUpstream};
use crate::support::wait::until;

/// docs/replies.md's row for a message hold mode cannot store.
const STORAGE: &str = "452 4.3.1 Insufficient system storage, try again later";

/// A hold layer with tokens to spare: a message is held only because upstream refuses it.
const LAYER: &str = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\n\
    cost = \"message\"\nlimit = 100\ninterval_ms = 1000\nmode = \"hold\"\nmax_wait_ms = 0\n";

/// A relay on `store` whose upstream refuses every message for now (`451` at MAIL), so each
/// is held.
async fn refusing_relay() -> Option<(SpoolOnMoto, TestUpstream, RelayProcess)> {
    let store = SpoolOnMoto::start().await?;
    let up = TestUpstream::start().await;
    up.set_fault(Fault::reply(Step::Mail, 451, "4.3.0 not now"));
    let relay = start(&up, LAYER, &store, "visibility_ms = 2000");
    Some((store, up, relay))
}

/// One message of `acme`; its reply.
async fn send_one(relay: &RelayProcess, id: &str) -> (u16, String) {
    let mut c = Client::connect(relay.addr).await;
    let (code, text) = c
        .send_mail("app@acme.example", &["user@example.net"], &mail("acme", id))
        .await;
    let _ = c.cmd("QUIT").await;
    (code, text)
}

fn assert_storage_refusal(id: &str, (code, text): &(u16, String)) {
    assert!(
        replies::docs().contains(&format!("| `{STORAGE}` (hold mode)")),
        "docs/replies.md's hold-mode row"
    );
    assert!(
        replies::matches(STORAGE, *code, text),
        "{id}: {code} {text}"
    );
}

/// S3 refusing every call: `452 4.3.1`, no entry sent, nothing held; back up, the next
/// message is held.
#[tokio::test]
async fn s3_down_gives_452_and_holds_nothing() {
    let Some((store, _up, relay)) = refusing_relay().await else {
        return;
    };
    store.aws.refuse(Service::S3, None);
    let reply = send_one(&relay, "while-s3-down").await;
    assert_storage_refusal("while-s3-down", &reply);
    assert!(
        store.aws.failed(Service::S3, "PutObject") >= 1,
        "the write was tried"
    );
    assert_eq!(store.aws.count(Service::Sqs, "SendMessage"), 0);
    assert_eq!(store.queued().await, 0);
    assert_eq!(store.held().await, Vec::<String>::new());

    store.aws.heal();
    let (code, text) = send_one(&relay, "after").await;
    assert!(code == 250 && is_held(&text), "{code} {text}");
    assert_eq!(store.held().await.len(), 1);
}

/// SQS refusing every call after the object was written: `452 4.3.1` and the object deleted.
/// Back up, a marker is held and released: when it reaches upstream the refused message has
/// not, and the queue is empty (nothing of it can come later).
#[tokio::test]
async fn sqs_down_after_the_s3_write_gives_452_and_nothing_is_sent_later() {
    let Some((store, up, relay)) = refusing_relay().await else {
        return;
    };
    store.aws.refuse(Service::Sqs, None);
    let reply = send_one(&relay, "while-sqs-down").await;
    assert_storage_refusal("while-sqs-down", &reply);
    assert!(
        store.aws.count(Service::S3, "PutObject") >= 1,
        "the object was written"
    );
    assert!(
        store.aws.failed(Service::Sqs, "SendMessage") >= 1,
        "its entry was tried"
    );
    assert!(
        store.aws.count(Service::S3, "DeleteObject") >= 1,
        "the object deleted"
    );
    assert_eq!(store.held().await, Vec::<String>::new());

    store.aws.heal();
    marker_released_alone(&store, &up, &relay, "while-sqs-down").await;
}

/// SQS enqueuing the entry and its answer lost (`500`): `452 4.3.1`, the object deleted; the
/// entry, received, finds its object gone and is dropped (`spool.object_gone`); a marker held
/// after it reaches upstream, the refused message never does.
#[tokio::test]
async fn sqs_answer_lost_after_enqueuing_gives_452_and_the_entry_is_never_sent() {
    let Some((store, up, relay)) = refusing_relay().await else {
        return;
    };
    store.aws.lose_answer(Service::Sqs, "SendMessage");
    let reply = send_one(&relay, "answer-lost").await;
    assert_storage_refusal("answer-lost", &reply);
    assert!(
        store.aws.failed(Service::Sqs, "SendMessage") >= 1,
        "its entry was sent"
    );
    assert!(
        store.aws.count(Service::S3, "DeleteObject") >= 1,
        "the object deleted"
    );
    assert_eq!(store.held().await, Vec::<String>::new());

    store.aws.heal();
    relay.wait_for_log("object_gone").await;
    marker_released_alone(&store, &up, &relay, "answer-lost").await;
}

/// A marker held (upstream still refusing), then upstream takes mail: the marker reaches it,
/// the queue empties, and `refused` never reached upstream.
async fn marker_released_alone(
    store: &SpoolOnMoto,
    up: &TestUpstream,
    relay: &RelayProcess,
    refused: &str,
) {
    let replies = send_all(relay.addr, "acme", &["marker".to_string()]).await;
    let (code, text) = &replies[0];
    assert!(*code == 250 && is_held(text), "the marker: {code} {text}");
    up.set_fault(Fault::None);
    up.wait_for(1).await;
    until("the queue empty", async || store.queued().await == 0).await;
    assert_eq!(
        up.message_ids(),
        vec![message_id("marker")],
        "{refused} never reached upstream"
    );
}
