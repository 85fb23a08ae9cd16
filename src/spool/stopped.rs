//! The keys an operator stopped (`postsuper -h`), kept in the spool's directory so that a
//! restart does not release what an operator held back: `stopped`, a JSON list of keys,
//! written whole as `stopped.new`, synced, renamed over the last one, and the directory
//! synced. A file that cannot be read refuses the start: releasing a key an operator stopped
//! (a compromised tenant's, say) is not a default to fall back to.

use std::io::Write;
use std::path::Path;

use super::commit::sync_dir;
use super::error::StoppedUnreadable;
use super::layout::Layout;
use super::record::HeldKey;

/// The keys stopped when the spool was last changed; none when the file is not there.
pub fn read(layout: &Layout) -> Result<Vec<HeldKey>, StoppedUnreadable> {
    let unreadable = |why: String| StoppedUnreadable {
        path: layout.stopped.display().to_string(),
        why,
    };
    let bytes = match std::fs::read(&layout.stopped) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(unreadable(e.to_string())),
    };
    serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))
}

/// Writes `keys` as the stopped keys, durably (see the module's doc).
pub fn write(layout: &Layout, keys: &[HeldKey]) -> std::io::Result<()> {
    let json = serde_json::to_vec(keys).expect("keys are plain data");
    let new = layout.root.join("stopped.new");
    write_synced(&new, &json)?;
    std::fs::rename(&new, &layout.stopped)?;
    sync_dir(&layout.root)
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> HeldKey {
        HeldKey {
            layer: "tenant".into(),
            key: k.into(),
        }
    }

    #[test]
    fn the_stopped_keys_are_read_back_as_written() {
        let root = std::env::temp_dir().join(format!("mailsluice-stopped-{}", std::process::id()));
        let layout = Layout::new(&root);
        layout.create().unwrap();
        assert_eq!(read(&layout).unwrap(), []);
        let keys = [key("acme"), key("a/b \"c\"")];
        write(&layout, &keys).unwrap();
        assert_eq!(read(&layout).unwrap(), keys);
        write(&layout, &keys[1..]).unwrap();
        assert_eq!(read(&layout).unwrap(), [key("a/b \"c\"")]);
        std::fs::write(&layout.stopped, b"[{").unwrap();
        let e = read(&layout).unwrap_err().to_string();
        assert!(e.contains("cannot be read") && e.contains("stopped"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
