//! `file://DIR` upstream, the embedded default: it lets mailsluice run with nothing else
//! installed, and gives tests and tools a place to read what was "sent".
//!
//! A reader (a script, a test, another daemon) watches the directory for `*.eml`. It must
//! never see half a message, nor a message without its envelope, so each file is written
//! under a dot-prefixed temporary name (`.tmp-<id>.eml.part`), fsynced, then renamed: the envelope first, the message
//! last. A crash leaves at worst a stray `.tmp-*` file or an envelope without its message, and
//! in both cases the client got no `250`, so it still holds the message.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::{Accepted, CheckFuture, ForwardFuture, Forwarder, Outgoing, Unready, UpstreamError};

/// Writes each message as `<id>.eml` with its envelope beside it in `<id>.json`.
#[derive(Debug, Clone)]
pub struct FileForwarder {
    dir: PathBuf,
}

/// What `<id>.json` holds: the envelope is not in the message bytes (Bcc recipients, bounce
/// sender), so it is kept beside them for whoever delivers the file onward.
#[derive(Serialize)]
struct EnvelopeFile<'a> {
    from: Option<&'a str>,
    rcpts: &'a [String],
    smtputf8: bool,
    body_8bit: bool,
    received_at: String,
}

impl FileForwarder {
    /// The directory is created at the first message (and again if someone removes it while
    /// we run), so constructing never fails on a fresh machine.
    pub fn new(dir: impl Into<PathBuf>) -> FileForwarder {
        FileForwarder { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Forwarder for FileForwarder {
    /// The directory can be made and is writable (not read-only).
    fn check(&self) -> CheckFuture<'_> {
        let dir = self.dir.clone();
        Box::pin(async move {
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(|e| Unready(format!("{}: {e}", dir.display())))?;
            let meta = (tokio::fs::metadata(&dir).await).map_err(|e| Unready(e.to_string()))?;
            if meta.permissions().readonly() {
                return Err(Unready(format!("{} is read-only", dir.display())));
            }
            Ok(None)
        })
    }

    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        let (envelope, pieces) = (outgoing.envelope, outgoing.pieces);
        Box::pin(async move {
            let dir = self.dir.clone();
            let received_at = rfc3339(SystemTime::now());
            let json = serde_json::to_vec_pretty(&EnvelopeFile {
                from: envelope.from.as_deref(),
                rcpts: &envelope.rcpts,
                smtputf8: envelope.smtputf8,
                body_8bit: envelope.body_8bit,
                received_at,
            })
            .map_err(|e| UpstreamError::Unavailable(format!("encoding envelope: {e}")))?;
            let message = pieces.concat();
            let id = new_id();
            let task_id = id.clone();
            tokio::task::spawn_blocking(move || write_pair(&dir, &task_id, &json, &message))
                .await
                .map_err(|e| UpstreamError::Unavailable(format!("file writer task: {e}")))?
                .map_err(|e| UpstreamError::Unavailable(e.to_string()))?;
            Ok(Accepted::new(format!("2.0.0 Ok: queued as {id}")))
        })
    }
}

/// Time first so that `ls` lists messages in arrival order; the random part keeps
/// concurrent writers (and several replicas sharing one directory) apart.
fn new_id() -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{millis:013}-{}", uuid::Uuid::new_v4().simple())
}

/// Why a message's files were not written; nothing of it is left for a reader.
#[derive(Debug, thiserror::Error)]
pub enum FileWriteError {
    #[error("creating {}: {error}", dir.display())]
    CreateDir { dir: PathBuf, error: std::io::Error },
    #[error("writing {}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("syncing {}: {error}", dir.display())]
    SyncDir { dir: PathBuf, error: std::io::Error },
}

fn write_pair(dir: &Path, id: &str, json: &[u8], message: &[u8]) -> Result<(), FileWriteError> {
    fs::create_dir_all(dir).map_err(|error| FileWriteError::CreateDir {
        dir: dir.to_owned(),
        error,
    })?;
    let envelope_path = dir.join(format!("{id}.json"));
    write_atomically(dir, &envelope_path, json)?;
    if let Err(e) = write_atomically(dir, &dir.join(format!("{id}.eml")), message) {
        // An envelope alone is harmless to readers, but it would be litter.
        let _ = fs::remove_file(&envelope_path);
        return Err(e);
    }
    // The renames are durable only once the directory itself is on disk: without this a
    // power cut after our `250` could lose a message the client has already forgotten.
    sync_dir(dir)
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), FileWriteError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Dot-prefixed for `*.eml` globs, and not ending in `.eml` for readers that filter on
    // the extension alone.
    let tmp = dir.join(format!(".tmp-{name}.part"));
    let result = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|error| {
        let _ = fs::remove_file(&tmp);
        FileWriteError::Write {
            path: path.to_owned(),
            error,
        }
    })
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<(), FileWriteError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|error| FileWriteError::SyncDir {
            dir: dir.to_owned(),
            error,
        })
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<(), FileWriteError> {
    Ok(())
}

/// UTC, millisecond precision (`2024-05-01T12:34:56.789Z`): readable by people and by every
/// JSON consumer, without pulling a date crate in for one line.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(951_782_400_123); // leap day 2000
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00.123Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_735_689_599); // last second of 2024
        assert_eq!(rfc3339(t), "2024-12-31T23:59:59.000Z");
    }

    #[test]
    fn ids_sort_by_time_and_differ() {
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 13 + 1 + 32);
    }
}
