//! Group commit of a directory: a file renamed into the directory is on stable storage only
//! once the directory is synced, and one sync covers every rename made before it starts. So
//! the messages of many clients that arrive together share one directory sync, and each
//! caller still returns only after a sync that began after its own rename.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::error::SyncFailed;

/// Whoever waits for a sync of the directory, answered with its result.
type Waiter = oneshot::Sender<Result<(), SyncFailed>>;

/// Syncs one directory for whoever asks, several askers at once.
#[derive(Debug, Clone)]
pub struct DirSync {
    asks: mpsc::UnboundedSender<Waiter>,
    /// Syncs made so far: the tests see that askers at once share them.
    #[cfg(test)]
    syncs: Arc<AtomicU64>,
}

impl DirSync {
    /// Starts the task that syncs `dir` (on the current runtime).
    pub fn start(dir: PathBuf) -> DirSync {
        let (asks, mut rx) = mpsc::unbounded_channel::<Waiter>();
        let syncs = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&syncs);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut waiting = vec![first];
                while let Ok(more) = rx.try_recv() {
                    waiting.push(more);
                }
                let dir = dir.clone();
                let synced = tokio::task::spawn_blocking(move || sync_dir(&dir)).await;
                let synced = (synced.map_err(std::io::Error::other))
                    .and_then(|synced| synced)
                    .map_err(|e| SyncFailed::Io(Arc::new(e)));
                counted.fetch_add(1, Ordering::Relaxed);
                for waiter in waiting {
                    let _ = waiter.send(synced.clone());
                }
            }
        });
        DirSync {
            asks,
            #[cfg(test)]
            syncs,
        }
    }

    /// Syncs made so far.
    #[cfg(test)]
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Returns once a sync of the directory that began after this call has ended.
    pub async fn sync(&self) -> Result<(), SyncFailed> {
        let (tx, rx) = oneshot::channel();
        self.asks.send(tx).map_err(|_| SyncFailed::Closed)?;
        rx.await.map_err(|_| SyncFailed::Closed)?
    }
}

/// `fsync` of a directory: its entries (the names renamed into it, and removed) are durable.
pub fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    #[cfg(test)]
    super::sync_log::record(super::sync_log::Step::DirBegun(dir.to_path_buf()));
    std::fs::File::open(dir).and_then(|d| d.sync_all())?;
    #[cfg(test)]
    super::sync_log::record(super::sync_log::Step::DirSynced(dir.to_path_buf()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many askers at once are all answered, by fewer syncs than askers.
    #[tokio::test]
    async fn askers_at_once_share_syncs() {
        let dir = std::env::temp_dir();
        let sync = DirSync::start(dir);
        let asks: Vec<_> = (0..50)
            .map(|_| {
                let s = sync.clone();
                tokio::spawn(async move { s.sync().await })
            })
            .collect();
        for ask in asks {
            ask.await.unwrap().unwrap();
        }
        assert!(sync.syncs() < 10, "{} syncs for 50 askers", sync.syncs());
    }

    #[tokio::test]
    async fn a_directory_that_cannot_be_opened_is_an_error() {
        let sync = DirSync::start("/nonexistent/mailsluice-spool".into());
        assert!(sync.sync().await.is_err());
    }
}
