//! Opening a spool directory, as the start does it and `check` repeats it: its directories
//! made when absent, its lock taken (one process per directory), a file written and removed
//! in `tmp/` (a directory that exists may still refuse writes: a read-only mount, another
//! owner). The filesystem's free space is read too, but only warned of: a spool that holds
//! messages must start to release them, which frees the space.

use std::path::Path;

use super::error::{SpoolError, Storage};
use super::layout::Layout;
use super::lock::DirLock;
use super::room;
use crate::config::SpoolConfig;

/// The spool's directory, made and locked for this process.
pub struct Opened {
    pub layout: Layout,
    pub lock: DirLock,
    /// Less than `min_free_bytes` free on its filesystem now: messages are refused until
    /// there is more.
    pub low_space: Option<Storage>,
}

/// Makes, locks and tries a write in the spool directory `dir` of `config`.
pub fn open_dir(dir: &Path, config: &SpoolConfig) -> Result<Opened, SpoolError> {
    let layout = Layout::new(dir);
    let io = |error| SpoolError::Io {
        dir: dir.to_path_buf(),
        error,
    };
    layout.create().map_err(io)?;
    let lock = DirLock::take(&layout.root)?;
    try_write(&layout.tmp).map_err(io)?;
    let low_space = room::leaves_free(&layout.root, 0, config.min_free_bytes).err();
    Ok(Opened {
        layout,
        lock,
        low_space,
    })
}

/// Writes, syncs and removes a file in `dir`.
fn try_write(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join("open-check");
    let written = std::fs::File::create(&path).and_then(|mut f| {
        f.write_all(b"mailsluice")?;
        f.sync_all()
    });
    let removed = std::fs::remove_file(&path);
    written.and(removed)
}
