//! The spool's directory, in the Postfix manner: one file per message, named by its place in
//! arrival order and its id, written in `tmp/`, synced, then renamed into `held/` (a rename is
//! atomic: a message is in `held/` whole or not at all); `failed/` keeps the messages given up
//! without a report, `damaged/` the files that could not be read back; `lock` is the
//! directory's lock, `stopped` the keys an operator stopped (see `stopped`).
//!
//! Why one file per message rather than an embedded store: a held message is written once,
//! read once and removed, never updated, which is what a directory does well; its durability is
//! the filesystem's own (no log to replay or compact), a damaged file costs one message, and
//! an operator can read, move or remove a message with `ls` and `mv`. The cost, a file sync per
//! message, is shared by messages that arrive together (the directory's sync is one for all,
//! see `commit`), and measured against Postfix's queue in bench/RESULTS.md.

use std::path::{Path, PathBuf};

/// The spool's directories.
#[derive(Debug, Clone)]
pub struct Layout {
    pub root: PathBuf,
    pub tmp: PathBuf,
    pub held: PathBuf,
    pub failed: PathBuf,
    pub damaged: PathBuf,
    pub stopped: PathBuf,
}

impl Layout {
    pub fn new(root: &Path) -> Layout {
        Layout {
            root: root.to_owned(),
            tmp: root.join("tmp"),
            held: root.join("held"),
            failed: root.join("failed"),
            damaged: root.join("damaged"),
            stopped: root.join("stopped"),
        }
    }

    /// Makes the directories that are missing.
    pub fn create(&self) -> std::io::Result<()> {
        for dir in [
            &self.root,
            &self.tmp,
            &self.held,
            &self.failed,
            &self.damaged,
        ] {
            std::fs::create_dir_all(dir)?;
        }
        Ok(())
    }
}

/// The file name of message `id`, `seq`-th in arrival order: sorted by name is sorted by
/// arrival.
pub fn file_name(seq: u64, id: &str) -> String {
    format!("{seq:016x}-{id}")
}

/// The place and id a file name gives; `None` for a name the spool did not write.
pub fn parse_name(name: &str) -> Option<(u64, &str)> {
    let (seq, id) = name.split_once('-')?;
    let ok = seq.len() == 16 && !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then(|| u64::from_str_radix(seq, 16).ok().map(|s| (s, id)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_gives_back_its_place_and_id() {
        let name = file_name(42, "00ff00ff00ff00ff");
        assert_eq!(name, "000000000000002a-00ff00ff00ff00ff");
        assert_eq!(parse_name(&name), Some((42, "00ff00ff00ff00ff")));
        for bad in ["lock", "2a-x", "000000000000002a-", "000000000000002a-a/b"] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
