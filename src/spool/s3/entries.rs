//! The s3 store's SQS calls and its entries. An entry is one SQS message whose body is a
//! small JSON ([`EntryBody`]: the message's id, place, age, key, size, whether a report),
//! sent after the message's object is written, its `MessageGroupId` the held key (SQS's fair
//! queues: one tenant's backlog does not delay the others' at the consumers). A received
//! entry's receipt handle is what deletes it or changes its visibility.

use aws_sdk_sqs::types::QueueAttributeName;
use aws_sdk_sqs::types::{ChangeMessageVisibilityBatchRequestEntry, MessageSystemAttributeName};
use serde::{Deserialize, Serialize};

use super::client::Clients;
use super::CallFailed;
use crate::spool::{HeldKey, Meta};

/// SQS's largest batch.
pub const BATCH: usize = 10;
/// SQS's longest visibility: 12 hours.
pub const MAX_VISIBILITY_SECS: u64 = 43_200;

/// The body of an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryBody {
    pub id: String,
    pub seq: u64,
    pub accepted_ms: u64,
    pub layer: String,
    pub key: String,
    pub bytes: u64,
    pub report: bool,
}

impl EntryBody {
    /// The entry of the message of `meta`: the message's bytes are the runs' lengths.
    pub fn of(meta: &Meta) -> EntryBody {
        EntryBody {
            id: meta.id.clone(),
            seq: meta.seq,
            accepted_ms: meta.accepted_ms,
            layer: meta.key.layer.clone(),
            key: meta.key.key.clone(),
            bytes: meta.lens.iter().sum(),
            report: meta.report,
        }
    }

    pub fn held_key(&self) -> HeldKey {
        HeldKey {
            layer: self.layer.clone(),
            key: self.key.clone(),
        }
    }
}

/// One entry received.
pub struct Received {
    pub body: EntryBody,
    pub receipt: String,
    /// How many times SQS gave it out, this time included.
    pub receive_count: u32,
}

/// What one receive gave: the entries, and the receipts of messages that are not entries.
#[derive(Default)]
pub struct Batch {
    pub entries: Vec<Received>,
    pub malformed: Vec<String>,
}

/// The `MessageGroupId` of `key`: `layer/key` when SQS takes it as it is (at most 128
/// printable ASCII characters), else a digest of it (one key, one group all the same).
pub fn group_of(key: &HeldKey) -> String {
    let group = format!("{}/{}", key.layer, key.key);
    if group.len() <= 128 && group.bytes().all(|b| b.is_ascii_graphic()) {
        return group;
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, group.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The entries of one queue.
pub struct Entries {
    pub queue_url: String,
}

impl Entries {
    /// Sends the entry of a message whose object is written.
    pub async fn send(
        &self,
        c: &Clients,
        body: &EntryBody,
        key: &HeldKey,
    ) -> Result<(), CallFailed> {
        let json = serde_json::to_string(body).expect("an entry is plain data");
        let send = (c.sqs.send_message())
            .queue_url(&self.queue_url)
            .message_body(json)
            .message_group_id(group_of(key))
            .send();
        let sent = c.call("sqs", "SendMessage", send).await;
        sent.map(|_| ()).map_err(|e| CallFailed::of(&e))
    }

    /// Up to `max` entries (at most [`BATCH`]), waiting up to `wait_secs` for one; each
    /// invisible to the others for `visibility_secs`. The call's bound is the wait and
    /// `timeout`.
    pub async fn receive(
        &self,
        c: &Clients,
        max: usize,
        wait_secs: u64,
        visibility_secs: u64,
        timeout: std::time::Duration,
    ) -> Result<Batch, CallFailed> {
        let bound = aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
            .operation_timeout(std::time::Duration::from_secs(wait_secs) + timeout)
            .build();
        let receive = (c.sqs.receive_message())
            .queue_url(&self.queue_url)
            .max_number_of_messages(max.clamp(1, BATCH) as i32)
            .wait_time_seconds(wait_secs as i32)
            .visibility_timeout(visibility_secs as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .customize()
            .config_override(aws_sdk_sqs::config::Builder::default().timeout_config(bound))
            .send();
        let received = c.call("sqs", "ReceiveMessage", receive).await;
        let received = received.map_err(|e| CallFailed::of(&e))?;
        let mut batch = Batch::default();
        for message in received.messages.unwrap_or_default() {
            let Some(receipt) = message.receipt_handle else {
                continue;
            };
            let count = (message.attributes.as_ref())
                .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                .and_then(|n| n.parse().ok())
                .unwrap_or(1);
            let body = message.body.as_deref().unwrap_or_default();
            match serde_json::from_str(body) {
                Ok(body) => batch.entries.push(Received {
                    body,
                    receipt,
                    receive_count: count,
                }),
                Err(_) => batch.malformed.push(receipt),
            }
        }
        Ok(batch)
    }

    /// Deletes a received entry.
    pub async fn delete(&self, c: &Clients, receipt: &str) -> Result<(), CallFailed> {
        let delete = (c.sqs.delete_message())
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send();
        let deleted = c.call("sqs", "DeleteMessage", delete).await;
        deleted.map(|_| ()).map_err(|e| CallFailed::of(&e))
    }

    /// Makes a received entry visible again in `secs` (0: at once; at most 12 hours).
    pub async fn show_in(&self, c: &Clients, receipt: &str, secs: u64) -> Result<(), CallFailed> {
        let change = (c.sqs.change_message_visibility())
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(secs.min(MAX_VISIBILITY_SECS) as i32)
            .send();
        let changed = c.call("sqs", "ChangeMessageVisibility", change).await;
        changed.map(|_| ()).map_err(|e| CallFailed::of(&e))
    }

    /// As [`Entries::show_in`], for up to [`BATCH`] entries in one call; how many failed.
    pub async fn show_all_in(
        &self,
        c: &Clients,
        receipts: &[String],
        secs: u64,
    ) -> Result<usize, CallFailed> {
        let entries = (receipts.iter().enumerate()).map(|(n, receipt)| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(n.to_string())
                .receipt_handle(receipt)
                .visibility_timeout(secs.min(MAX_VISIBILITY_SECS) as i32)
                .build()
                .map_err(|e| CallFailed(e.to_string()))
        });
        let entries = entries.collect::<Result<Vec<_>, _>>()?;
        let change = (c.sqs.change_message_visibility_batch())
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send();
        let changed = c.call("sqs", "ChangeMessageVisibilityBatch", change).await;
        Ok(changed.map_err(|e| CallFailed::of(&e))?.failed.len())
    }

    /// The queue's approximate count of entries: visible, received and delayed.
    pub async fn count(&self, c: &Clients) -> Result<u64, CallFailed> {
        let names = [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed,
        ];
        let get = (c.sqs.get_queue_attributes())
            .queue_url(&self.queue_url)
            .set_attribute_names(Some(names.to_vec()))
            .send();
        let got = c.call("sqs", "GetQueueAttributes", get).await;
        let attributes = got
            .map_err(|e| CallFailed::of(&e))?
            .attributes
            .unwrap_or_default();
        let read = |name: &QueueAttributeName| {
            (attributes.get(name))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(names.iter().map(read).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_its_group_or_a_digest_of_it() {
        let key = |k: &str| HeldKey {
            layer: "tenant".into(),
            key: k.into(),
        };
        assert_eq!(group_of(&key("acme")), "tenant/acme");
        let long = group_of(&key(&"x".repeat(200)));
        assert!(long.starts_with("sha256:") && long.len() <= 128, "{long}");
        let spaced = group_of(&key("a b"));
        assert!(spaced.starts_with("sha256:"), "{spaced}");
        assert_ne!(spaced, group_of(&key("a  b")));
    }
}
