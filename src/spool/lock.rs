//! One relay process per spool directory: an exclusive `flock` on `DIR/lock`, held for the
//! process's life and let go by the kernel when it ends (even by SIGKILL), so a restart never
//! finds a stale lock. Two processes releasing the same messages would send each twice.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::Path;

use super::error::SpoolError;

/// The lock of a spool directory, held while this lives.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock of `dir`, writing this process's id in it for whoever finds it taken.
    pub fn take(dir: &Path) -> Result<DirLock, SpoolError> {
        let io = |error| SpoolError::Io {
            dir: dir.to_owned(),
            error,
        };
        let mut file = (OpenOptions::new().read(true).write(true).create(true))
            .truncate(false)
            .open(dir.join("lock"))
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = Some(pid.trim().to_string()).filter(|p| !p.is_empty());
                return Err(SpoolError::Locked {
                    dir: dir.to_owned(),
                    pid,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_with_the_directory_named() {
        let dir = std::env::temp_dir().join(format!("ms-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = DirLock::take(&dir).unwrap();
        let err = DirLock::take(&dir).unwrap_err().to_string();
        assert!(err.contains(&dir.display().to_string()), "{err}");
        assert!(err.contains(&std::process::id().to_string()), "{err}");
        drop(first);
        DirLock::take(&dir).expect("free again once the first lets go");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
