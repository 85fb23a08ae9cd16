//! The spool on S3 and SQS (`[spool] store = "s3"`), against moto's server through the
//! `AwsFault` proxy, with the relay binary as a process of its own (it is the binary that
//! opens the store as a deployment does, and only a process can be SIGKILLed): two replicas
//! releasing one queue, one killed on the way (`replicas`); S3 or SQS down, or SQS's answer
//! lost after it enqueued the entry (`faults`); one tenant's burst with another's messages
//! behind it in the queue (`fairness`). No timed assertions: each waits for what it needs
//! (at most 30 s) and checks what arrived.

mod fairness;
mod faults;
mod replicas;

use std::net::SocketAddr;

use crate::support::config::TestConfig;
use crate::support::process::RelayProcess;
use crate::support::relay::Client;
use crate::support::spool_s3::{SpoolOnMoto, CREDENTIALS};
use crate::support::upstream::TestUpstream;

/// A relay process forwarding to `up` over plain SMTP (a failing upstream probed every
/// 100 ms), with `layers`, the spool on `store` with `spool` keys added.
pub fn start(up: &TestUpstream, layers: &str, store: &SpoolOnMoto, spool: &str) -> RelayProcess {
    let text = TestConfig::new()
        .upstream(&up.url())
        .then("timeout_ms = 2000\ntls = \"none\"\nbreaker_probe_ms = 100")
        .then(layers)
        .then(&store.section(spool))
        .text();
    RelayProcess::start_env(&text, "info", &CREDENTIALS)
}

/// A message of `tenant` whose `Message-ID` is `<{id}@test>`.
pub fn mail(tenant: &str, id: &str) -> Vec<u8> {
    format!(
        "X-Tenant: {tenant}\r\nMessage-ID: <{id}@test>\r\nSubject: {id}\r\n\r\nbody of {id}\r\n"
    )
    .into_bytes()
}

/// The `Message-ID` upstream sees of the message [`mail`] made with `id`.
pub fn message_id(id: &str) -> String {
    format!("<{id}@test>")
}

/// Sends each of `ids` of `tenant` in turn on one connection to `addr`; each one's reply.
pub async fn send_all(addr: SocketAddr, tenant: &str, ids: &[String]) -> Vec<(u16, String)> {
    let mut c = Client::connect(addr).await;
    let mut replies = Vec::new();
    for id in ids {
        let msg = mail(tenant, id);
        replies.push(
            c.send_mail("app@acme.example", &["user@example.net"], &msg)
                .await,
        );
    }
    let _ = c.cmd("QUIT").await;
    replies
}

pub fn is_held(text: &str) -> bool {
    text.ends_with("(held for later delivery)")
}
