//! The receiver and the heartbeat of one replica. The receiver long-polls the queue (20 s,
//! batches of 10) while this replica holds fewer than `receive_max` entries, and puts each
//! into the index (which keeps a key's order by `seq` among those it has), until it is told
//! to stop (a receive in flight then answers first, within `timeout_ms`). The heartbeat extends every held entry's visibility every third of
//! `visibility_ms`, so that no other replica takes one while this one has it, and it goes on
//! after the stop for the entries still with upstream.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::entries::{Batch, BATCH};
use super::S3Store;
use crate::spool::Spool;

/// SQS's longest long poll: one request every 20 s on an idle queue.
const LONG_POLL_SECS: u64 = 20;
/// The longest pause after a failed receive (doubling from 1 s).
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Starts receiving into `spool` (an s3 store's) until `stop` completes; the task ends then.
pub fn start(
    spool: Arc<Spool>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(heartbeat(Arc::downgrade(&spool)));
    tokio::spawn(async move {
        let Some(s3) = spool.s3_store() else {
            return;
        };
        receive(&spool, s3, stop).await;
        s3.stopping.store(true, Ordering::Relaxed);
    })
}

/// Receives while there is room, until `stop`. A receive in flight then is given up to
/// `timeout_ms` to answer: the entries of an answer on its way are invisible to the others
/// already, and taken in here they are put back at once rather than after `visibility_ms`.
async fn receive(spool: &Spool, s3: &S3Store, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let visibility = s3.settings.visibility.as_millis().div_ceil(1000) as u64;
    let mut backoff = Duration::from_secs(1);
    loop {
        let room = s3.settings.receive_max.saturating_sub(s3.received().len());
        if room == 0 {
            tokio::select! {
                _ = s3.freed.notified() => continue,
                _ = &mut stop => return,
            }
        }
        let c = &s3.clients;
        let receive = (s3.entries).receive(
            c,
            room.min(BATCH),
            LONG_POLL_SECS,
            visibility,
            s3.settings.timeout,
        );
        tokio::pin!(receive);
        let received = tokio::select! {
            received = &mut receive => received,
            _ = &mut stop => {
                if let Ok(Ok(batch)) = tokio::time::timeout(s3.settings.timeout, receive).await {
                    take_in(spool, s3, batch).await;
                }
                return;
            }
        };
        match received {
            Ok(batch) => {
                backoff = Duration::from_secs(1);
                take_in(spool, s3, batch).await;
            }
            Err(e) => {
                tracing::warn!(
                    target: "mailsluice::spool",
                    queue = s3.settings.queue_url.as_str(),
                    error = %e,
                    retry_in_s = backoff.as_secs(),
                    "spool.receive_failed"
                );
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = &mut stop => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One receive's entries into the index; what is not an entry deleted.
async fn take_in(spool: &Spool, s3: &S3Store, batch: Batch) {
    for receipt in batch.malformed {
        tracing::warn!(target: "mailsluice::spool", queue = s3.settings.queue_url.as_str(), "spool.entry_malformed: a message of the queue that is not an entry is deleted");
        let _ = s3.entries.delete(&s3.clients, &receipt).await;
    }
    for received in batch.entries {
        s3.take_in(spool, received);
    }
}

/// Extends the visibility of every entry held here, every third of `visibility_ms`, until
/// the spool is gone, or it stopped receiving and holds none.
async fn heartbeat(spool: Weak<Spool>) {
    loop {
        let every = {
            let Some(spool) = spool.upgrade() else {
                return;
            };
            let Some(s3) = spool.s3_store() else {
                return;
            };
            s3.settings.visibility / 3
        };
        tokio::time::sleep(every).await;
        let Some(spool) = spool.upgrade() else {
            return;
        };
        let Some(s3) = spool.s3_store() else {
            return;
        };
        let _changing = s3.visibility.lock().await;
        let receipts: Vec<String> = s3.received().values().cloned().collect();
        if receipts.is_empty() && s3.stopping.load(Ordering::Relaxed) {
            return;
        }
        let visibility = s3.settings.visibility.as_millis().div_ceil(1000) as u64;
        for batch in receipts.chunks(BATCH) {
            let extended = s3.entries.show_all_in(&s3.clients, batch, visibility).await;
            match extended {
                Ok(0) => {}
                Ok(failed) => {
                    tracing::warn!(target: "mailsluice::spool", failed, "spool.heartbeat: some entries' visibility was not extended")
                }
                Err(e) => {
                    tracing::warn!(target: "mailsluice::spool", error = %e, "spool.heartbeat_failed")
                }
            }
        }
    }
}
