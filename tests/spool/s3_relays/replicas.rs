//! Two replicas on one queue and one bucket, sharing a hold layer on Redis: one SIGKILLed
//! while both release. Its entries come back after `visibility_ms` and the other delivers
//! them: every `250` reaches upstream, and a message reaches it twice only if the killed
//! replica had it with upstream (or had sent it and not yet deleted its entry) at the kill.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::{is_held, message_id, send_all, start};
use crate::support::redis::RedisServer;
use crate::support::spool_s3::SpoolOnMoto;
use crate::support::upstream::{Fault, Step, TestUpstream};
use crate::support::wait::{until, within};

const MESSAGES: usize = 200;
const TENANTS: [&str; 4] = ["t1", "t2", "t3", "t4"];
/// Each replica's `receive_max`: the most entries it holds received, so the most the killed
/// one can have had with upstream.
const RECEIVE_MAX: usize = 20;
/// Messages upstream got when the replica is killed: both are releasing by then.
const KILL_AFTER: usize = 60;

/// The shared hold layer: ten a second per tenant across both replicas (forty in all: the
/// 200 take about five seconds to leave), held at once when the tokens are not there.
fn layer(redis: &RedisServer) -> String {
    format!(
        "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
         limit = 10\ninterval_ms = 1000\nburst = 1\nmode = \"hold\"\nmax_wait_ms = 0\n\
         store = \"redis\"\n[redis]\nurl = \"{}\"\n",
        redis.url()
    )
}

/// 200 messages held across two replicas while upstream refuses (`451` at MAIL: each is
/// held, then held at once once the breaker opens); then upstream takes them, 100 ms after
/// each final dot (so that some are with upstream at any time); once 60 reached it, one
/// replica is SIGKILLed. Every message answered `250` reaches upstream, nothing else does,
/// and no more are there twice than the killed replica's `receive_max`.
#[tokio::test]
async fn two_replicas_one_sigkilled_while_releasing_every_250_reaches_upstream() {
    let Some(store) = SpoolOnMoto::start().await else {
        return;
    };
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let up = TestUpstream::start().await;
    up.set_fault(Fault::reply(Step::Mail, 451, "4.3.0 not now"));
    let spool = format!("visibility_ms = 2000\nreceive_max = {RECEIVE_MAX}");
    let relays = [
        start(&up, &layer(&redis), &store, &spool),
        start(&up, &layer(&redis), &store, &spool),
    ];

    // Eight clients, two per tenant, one on each replica: 25 messages each.
    let per_client = MESSAGES / 8;
    let sends: Vec<_> = (0..8)
        .map(|c| {
            let (addr, tenant) = (relays[c % 2].addr, TENANTS[c / 2]);
            let ids: Vec<String> = (0..per_client)
                .map(|i| format!("{tenant}-{c}-{i:02}"))
                .collect();
            tokio::spawn(async move {
                let replies = send_all(addr, tenant, &ids).await;
                ids.into_iter().zip(replies).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut accepted = HashSet::new();
    for send in sends {
        for (id, (code, text)) in send.await.unwrap() {
            assert!(code == 250 && is_held(&text), "{id}: {code} {text}");
            accepted.insert(message_id(&id));
        }
    }
    assert_eq!(accepted.len(), MESSAGES);
    assert!(up.messages().is_empty(), "upstream took nothing yet");

    up.set_fault(Fault::stall(Step::EndOfData, Duration::from_millis(100)));
    until("60 upstream", async || up.messages().len() >= KILL_AFTER).await;
    let [killed, survivor] = relays;
    killed.signal(libc::SIGKILL);
    let mut killed = killed;
    killed.reap();
    let at_kill = up.messages().len();
    let delivered_by_killed = (killed.logs().iter())
        .filter(|l| l.contains("mailsluice::release") && l.contains("outcome=delivered"))
        .count();
    assert!(delivered_by_killed > 0, "the killed replica was releasing");
    assert!(
        at_kill < MESSAGES,
        "killed while releasing ({at_kill} upstream)"
    );

    let missing = || {
        let got: HashSet<String> = up.message_ids().into_iter().collect();
        (accepted.iter())
            .filter(|id| !got.contains(*id))
            .cloned()
            .collect::<Vec<_>>()
    };
    // A minute: the survivor releases the rest alone on a machine that may be busy.
    if !within(Duration::from_secs(60), async || missing().is_empty()).await {
        let warnings: Vec<String> = (survivor.logs().into_iter())
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect();
        panic!(
            "not upstream: {:?}; {} queued, {} held; the survivor's warnings: {warnings:#?}",
            missing(),
            store.queued().await,
            store.held().await.len()
        );
    }
    until("the queue empty", async || store.queued().await == 0).await;
    // An object outlives its entry only when its replica died between the two deletes.
    let orphans = store.held().await.len();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for id in up.message_ids() {
        *seen.entry(id).or_default() += 1;
    }
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    eprintln!(
        "killed with {at_kill} of {MESSAGES} upstream ({delivered_by_killed} by it); \
         {duplicates} sent twice \
         (bound: receive_max {RECEIVE_MAX}); {orphans} objects left in held/"
    );
    assert!(
        seen.keys().all(|id| accepted.contains(id)),
        "nothing upstream that was not answered 250"
    );
    assert!(
        duplicates <= RECEIVE_MAX,
        "{duplicates} duplicates: {seen:?}"
    );
    assert!(orphans <= RECEIVE_MAX, "{orphans} objects left in held/");
    drop(survivor);
}
