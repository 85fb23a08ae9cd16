//! Whether the spool has room for one more message: its own bound (`max_bytes`, counted in
//! the index) and its filesystem's free space (`min_free_bytes`, asked of the kernel for each
//! message: another process may fill the disk too).

use std::path::Path;

use super::error::Storage;

/// Bytes free on the filesystem of `dir` for an unprivileged writer.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let stat = rustix::fs::statvfs(dir)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Whether `size` more bytes leave at least `min_free` free on the filesystem of `dir`.
pub fn leaves_free(dir: &Path, size: u64, min_free: u64) -> Result<(), Storage> {
    let free = free_bytes(dir).map_err(|e| Storage::Unwritable(e.to_string()))?;
    match free.saturating_sub(size) >= min_free && free >= size {
        true => Ok(()),
        false => Err(Storage::MinFree { min: min_free }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_space_is_read_and_bounds_a_write() {
        let dir = std::env::temp_dir();
        let free = free_bytes(&dir).unwrap();
        assert!(free > 0);
        assert!(leaves_free(&dir, 1, 0).is_ok());
        assert_eq!(
            leaves_free(&dir, 1, free),
            Err(Storage::MinFree { min: free })
        );
    }
}
