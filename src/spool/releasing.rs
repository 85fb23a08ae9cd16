//! The releaser's side of the spool: the messages that may go taken, read back whole, and
//! what an attempt did to each put in its place (removed, stepped aside until its time or
//! its upstream's return, failed, set aside as damaged).

use std::io::Read;

use super::index::State;
use super::layout::file_name;
use super::record::{self, Held, HeldKey};
use super::{recover, Damaged, Spool, Store, Ticket, Unread};
use crate::clock::Nanos;

impl Spool {
    /// When the first message waiting for its turn may go.
    pub fn next_due(&self) -> Option<Nanos> {
        self.index().next_due()
    }

    /// Takes up to `max` messages that may go now, for release: the oldest first, a key's
    /// in the order they came (those that failed for now step aside until their time), no
    /// more of a key at once than its width ([`Spool::set_width`]).
    pub fn take_due(&self, max: usize) -> Vec<Ticket> {
        self.index().take_due(self.clock.now(), max)
    }

    /// Sets how many of `key`'s messages may be released at once (1 until it is set): its
    /// route's concurrency, which the releaser learns from an attempt.
    pub fn set_width(&self, key: &HeldKey, width: usize) {
        self.index().set_width(key, width);
    }

    /// The message of `ticket`, read back whole and its digest checked.
    pub async fn read(&self, ticket: &Ticket) -> Result<Held, Unread> {
        let dir = match &self.store {
            Store::Dir(dir) => dir,
            Store::S3(s3) => return s3.read(self, ticket).await,
        };
        let path = dir.layout.held.join(file_name(ticket.seq, &ticket.id));
        let read = tokio::task::spawn_blocking(move || {
            let mut bytes = Vec::new();
            recover::open_regular(&path)?.read_to_end(&mut bytes)?;
            Ok::<_, std::io::Error>(bytes)
        })
        .await;
        let bytes = (read.map_err(|e| Damaged(e.to_string()))?)
            .map_err(|e| Damaged(format!("cannot be read: {e}")))?;
        Ok(check_names(record::decode(bytes)?, ticket)?)
    }

    /// The attempt of `ticket` did not end it: it steps aside and may go again at `at`; its
    /// key's other messages go on meanwhile.
    pub async fn retry(&self, ticket: &Ticket, at: Nanos, answer: String) {
        if let Store::S3(s3) = &self.store {
            return s3.put_back(self, ticket, at).await;
        }
        self.index().retry(&ticket.id, at, answer);
        self.changed.notify_one();
    }

    /// As [`Spool::retry`], for a message kept back by `upstream`'s failure, not its own: it
    /// goes again at `at`, or as soon as [`Spool::upstream_back`] says that upstream answers.
    /// With S3 and SQS the entry is put back as by a retry: another replica may take it.
    pub async fn wait_for_upstream(
        &self,
        ticket: &Ticket,
        at: Nanos,
        answer: String,
        upstream: &str,
    ) {
        if let Store::S3(s3) = &self.store {
            return s3.put_back(self, ticket, at).await;
        }
        self.index().wait_for(&ticket.id, at, answer, upstream);
        self.changed.notify_one();
    }

    /// `upstream` answers again (`max: None`): every message waiting for it may go now; or
    /// (`Some(1)`) one of them, to probe it. How many may.
    pub fn upstream_back(&self, upstream: &str, max: Option<usize>) -> usize {
        let now = self.clock.now();
        let due = (self.index()).upstream_back(upstream, now, max.unwrap_or(usize::MAX));
        if due > 0 {
            self.changed.notify_one();
        }
        due
    }

    /// How many messages wait for `upstream` to answer again (the status page).
    pub fn waiting_for(&self, upstream: &str) -> usize {
        self.index().waiting_for(upstream)
    }

    /// Removes message `id` (delivered, reported, given up, or by an operator); whether it
    /// was there. Its key's next message may go at once, while the file is removed and the
    /// directory synced (with other removals): until that sync a restart would send it again
    /// (the duplicate window, which the sync closes).
    pub async fn remove(&self, id: &str) -> bool {
        let dir = match &self.store {
            Store::Dir(dir) => dir,
            Store::S3(s3) => return s3.remove(self, id).await,
        };
        let Some((_, entry)) = self.index().remove(id) else {
            return false;
        };
        self.changed.notify_one();
        let (dir, sync) = match entry.state {
            State::Failed => (&dir.layout.failed, &dir.failed_sync),
            _ => (&dir.layout.held, &dir.held_sync),
        };
        let path = dir.join(file_name(entry.seq, id));
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_file(path)).await;
        if let Ok(Err(e)) = &removed {
            tracing::error!(target: "mailsluice::spool", id, error = %e, "spool.remove_failed");
        }
        let _ = sync.sync().await;
        true
    }

    /// Moves `ticket`'s message to `failed/`, kept for the operator (no report could be sent).
    pub async fn fail(&self, ticket: &Ticket, answer: String) {
        let dir = match &self.store {
            Store::Dir(dir) => dir,
            Store::S3(s3) => return s3.set_apart(self, ticket, true).await,
        };
        let name = file_name(ticket.seq, &ticket.id);
        let (from, to) = (dir.layout.held.join(&name), dir.layout.failed.join(&name));
        let _ = tokio::task::spawn_blocking(move || std::fs::rename(from, to)).await;
        let _ = dir.failed_sync.sync().await;
        let _ = dir.held_sync.sync().await;
        self.index().failed(&ticket.id, answer);
        self.changed.notify_one();
    }

    /// Sets `ticket`'s file aside in `damaged/` (logged) and forgets the message.
    pub async fn set_aside(&self, ticket: &Ticket, why: &str) {
        let dir = match &self.store {
            Store::Dir(dir) => dir,
            Store::S3(s3) => return s3.set_apart(self, ticket, false).await,
        };
        let (layout, name, why2) = (
            dir.layout.clone(),
            file_name(ticket.seq, &ticket.id),
            why.to_string(),
        );
        let _ = tokio::task::spawn_blocking(move || {
            recover::set_aside(&layout, &layout.held.join(&name), &name, &why2)
        })
        .await;
        self.index().remove(&ticket.id);
        self.changed.notify_one();
    }
}

/// A message read back is the one its ticket names.
pub(super) fn check_names(held: Held, ticket: &Ticket) -> Result<Held, Damaged> {
    if held.meta.id != *ticket.id || held.meta.seq != ticket.seq {
        return Err(Damaged("its meta names another message".into()));
    }
    Ok(held)
}
