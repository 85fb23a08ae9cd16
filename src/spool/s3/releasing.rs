//! The releaser's side of the s3 store: an entry received taken into the index, its object
//! read back, and what an attempt did to it: deleted (entry, then object), put back visible
//! at its next try (for any replica), copied to `failed/` or `damaged/`; at shutdown the
//! entries not started put back at once.

use super::entries;
use super::objects::Place;
use super::S3Store;
use crate::clock::Nanos;
use crate::spool::error::Unread;
use crate::spool::index::{Entry, State};
use crate::spool::record::{self, Held};
use crate::spool::releasing::check_names;
use crate::spool::{Spool, Ticket};

impl S3Store {
    /// The message of `ticket`, read from its object; an entry whose object is gone is
    /// deleted here (logged `spool.object_gone`) and never sent.
    pub async fn read(&self, spool: &Spool, ticket: &Ticket) -> Result<Held, Unread> {
        let name = self.objects.name(Place::Held, &ticket.id);
        let got = self.objects.get(&self.clients, &name).await;
        let bytes = match got {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                tracing::info!(target: "mailsluice::spool", id = &*ticket.id, "spool.object_gone: an entry without its object is dropped");
                if let Some(receipt) = self.forget(spool, &ticket.id) {
                    let _ = self.entries.delete(&self.clients, &receipt).await;
                }
                return Err(Unread::Gone);
            }
            Err(e) => return Err(Unread::Unavailable(e.0)),
        };
        Ok(check_names(record::decode(bytes)?, ticket)?)
    }

    /// Forgets message `id` here (its index entry and receipt); its receipt, if it had one.
    pub(super) fn forget(&self, spool: &Spool, id: &str) -> Option<String> {
        spool.index().remove(id);
        let receipt = self.received().remove(id);
        spool.changed.notify_one();
        self.freed.notify_one();
        receipt
    }

    /// The attempt of `ticket` did not end it: its entry is made visible again at `at` (to
    /// any replica) and forgotten here.
    pub async fn put_back(&self, spool: &Spool, ticket: &Ticket, at: Nanos) {
        let _changing = self.visibility.lock().await;
        let Some(receipt) = self.forget(spool, &ticket.id) else {
            return;
        };
        let wait = at.saturating_sub(spool.clock.now());
        let secs = wait.div_ceil(1_000_000_000);
        if let Err(e) = self.entries.show_in(&self.clients, &receipt, secs).await {
            tracing::warn!(target: "mailsluice::spool", id = &*ticket.id, error = %e, "spool.put_back_failed: it comes back after visibility_ms");
        }
    }

    /// Removes message `id`: its entry (when received here), then its object (a crash
    /// between leaves an object without an entry, never a message sent twice). Whether it
    /// was held here.
    pub async fn remove(&self, spool: &Spool, id: &str) -> bool {
        let was_here = spool.index().get(id).is_some();
        if let Some(receipt) = self.forget(spool, id) {
            if let Err(e) = self.entries.delete(&self.clients, &receipt).await {
                tracing::error!(target: "mailsluice::spool", id, error = %e, "spool.remove_failed");
                return was_here;
            }
        }
        let name = self.objects.name(Place::Held, id);
        if let Err(e) = self.objects.delete(&self.clients, &name).await {
            tracing::error!(target: "mailsluice::spool", id, error = %e, "spool.remove_failed");
        }
        was_here
    }

    /// Copies `ticket`'s object to `failed/` (given up, no report) or `damaged/`, then
    /// removes it. A copy that fails leaves it held: it comes back after `retry_min_ms`.
    pub async fn set_apart(&self, spool: &Spool, ticket: &Ticket, failed: bool) {
        let to = if failed {
            Place::Failed
        } else {
            Place::Damaged
        };
        let from = self.objects.name(Place::Held, &ticket.id);
        let to = self.objects.name(to, &ticket.id);
        if let Err(e) = self.objects.copy(&self.clients, &from, &to).await {
            tracing::error!(target: "mailsluice::spool", id = &*ticket.id, error = %e, "spool.set_apart_failed: kept held");
            let again = spool.config.retry_min_ms.get_ref().get() * 1_000_000;
            return self
                .put_back(spool, ticket, spool.clock.now() + again)
                .await;
        }
        self.remove(spool, &ticket.id).await;
    }

    /// An entry received: into the index (due now), its receipt kept. One received again
    /// (its visibility lapsed) keeps its place and takes the new receipt.
    pub(super) fn take_in(&self, spool: &Spool, received: entries::Received) {
        let body = received.body;
        let id: Box<str> = body.id.as_str().into();
        let mut index = spool.index();
        if index.get(&id).is_none() {
            let entry = Entry {
                id: id.clone(),
                seq: body.seq,
                bytes: body.bytes,
                accepted_ms: body.accepted_ms,
                state: State::Held,
                attempts: received.receive_count.saturating_sub(1),
                next: 0,
                last: None,
                report: body.report,
                waits_for: None,
            };
            index.recovered(&body.held_key(), entry);
        }
        drop(index);
        self.received().insert(id, received.receipt);
        spool.changed.notify_one();
    }

    /// The entries received and not started (waiting their turn): forgotten here and made
    /// visible at once, for another replica (at shutdown).
    pub async fn put_back_unstarted(&self, spool: &Spool) {
        let _changing = self.visibility.lock().await;
        let waiting: Vec<Box<str>> = {
            let index = spool.index();
            let received = self.received();
            (received.keys())
                .filter(|id| index.get(id).is_some_and(|(_, e)| e.state == State::Held))
                .cloned()
                .collect()
        };
        let receipts: Vec<String> = (waiting.iter())
            .filter_map(|id| self.forget(spool, id))
            .collect();
        for batch in receipts.chunks(entries::BATCH) {
            if let Err(e) = self.entries.show_all_in(&self.clients, batch, 0).await {
                tracing::warn!(target: "mailsluice::spool", error = %e, "spool.put_back_failed: they come back after visibility_ms");
            }
        }
        if !receipts.is_empty() {
            tracing::info!(target: "mailsluice::spool", entries = receipts.len(), "spool: entries not started put back for the other replicas");
        }
    }
}
