//! The spool read back at start: what `tmp/` holds was never answered `250` and goes; every
//! message of `held/` and `failed/` takes its place again with its key, its order and its age
//! (from its meta alone: the bytes are read, and their digest checked, at release); a file
//! that cannot be read back is set aside in `damaged/` with an error log. The files are read
//! in inode order by several threads at once (a cold disk serves reads in flight together,
//! and each thread's in one direction).
//!
//! Whatever else is found there is set aside too, never waited on nor a reason to refuse the
//! start: anything but a regular file (a FIFO would block its reader for ever, a directory
//! cannot be removed as a file), and a second file of an id already read (two queues of one
//! id would wedge both).

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::DirEntryExt;
use std::path::{Path, PathBuf};

use super::error::Damaged;
use super::index::{Entry, Index, State};
use super::layout::{parse_name, Layout};
use super::record::{meta_of, HeldKey, MAX_META};

/// What the start found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub held: usize,
    pub failed: usize,
    pub damaged: usize,
    /// Half-written files removed from `tmp/`.
    pub unfinished: usize,
}

/// Reads the spool of `layout` into `index`.
pub fn recover(layout: &Layout, index: &mut Index) -> std::io::Result<Recovered> {
    let mut found = Recovered::default();
    for entry in std::fs::read_dir(&layout.tmp)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        match entry.file_type()?.is_file() {
            true => std::fs::remove_file(entry.path())?,
            false => {
                set_aside(layout, &entry.path(), &name, "not a regular file");
                found.damaged += 1;
                continue;
            }
        }
        found.unfinished += 1;
    }
    let mut files = Vec::new();
    for (dir, state) in [(&layout.held, State::Held), (&layout.failed, State::Failed)] {
        for file in std::fs::read_dir(dir)? {
            let file = file?;
            let name = file.file_name().to_string_lossy().into_owned();
            files.push((file.ino(), (file.path(), name, state)));
        }
    }
    // In the order of their inodes (a directory lists its names in hash order): each reader
    // then goes through its part of the disk in one direction.
    files.sort_unstable_by_key(|(ino, _)| *ino);
    let files: Vec<_> = files.into_iter().map(|(_, file)| file).collect();
    let mut entries = Vec::with_capacity(files.len());
    for ((path, name, _), read) in files.iter().zip(read_all(&files)) {
        match read {
            Ok(read) => entries.push((read, path, name)),
            Err(why) => {
                set_aside(layout, path, name, &why.0);
                found.damaged += 1;
            }
        }
    }
    entries.sort_by_key(|((_, e), _, _)| e.seq);
    let mut ids = HashSet::with_capacity(entries.len());
    for ((key, entry), path, name) in entries {
        if !ids.insert(entry.id.clone()) {
            let why = format!("a second file of message {}", entry.id);
            set_aside(layout, path, name, &why);
            found.damaged += 1;
            continue;
        }
        match entry.state {
            State::Failed => found.failed += 1,
            _ => found.held += 1,
        }
        index.recovered(&key, entry);
    }
    Ok(found)
}

/// Files read at once at start: a cold disk answers many reads in flight far faster than one
/// after the other.
const READERS: usize = 64;

/// The entries of `files`, in their order, read by [`READERS`] threads.
fn read_all(files: &[(PathBuf, String, State)]) -> Vec<Result<(HeldKey, Entry), Damaged>> {
    let chunk = files.len().div_ceil(READERS).max(1);
    std::thread::scope(|scope| {
        let readers: Vec<_> = (files.chunks(chunk))
            .map(|part| {
                scope.spawn(move || {
                    (part.iter())
                        .map(|(path, name, state)| read_entry(path, name, *state))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        (readers.into_iter())
            .flat_map(|r| r.join().expect("a reader does not panic"))
            .collect()
    })
}

/// The entry of one file, from its name and its meta.
fn read_entry(path: &Path, name: &str, state: State) -> Result<(HeldKey, Entry), Damaged> {
    let not_ours = || Damaged("a name the spool does not write".into());
    let (seq, id) = parse_name(name).ok_or_else(not_ours)?;
    let head = read_head(path).map_err(|e| Damaged(e.to_string()))?;
    let meta = meta_of(&head)?;
    if meta.seq != seq || meta.id != id {
        return Err(Damaged(format!("its meta names {}-{}", meta.seq, meta.id)));
    }
    let entry = Entry {
        id: id.into(),
        seq,
        bytes: meta.lens.iter().sum(),
        accepted_ms: meta.accepted_ms,
        state,
        attempts: 0,
        next: 0,
        last: None,
        report: meta.report,
        waits_for: None,
    };
    Ok((meta.key, entry))
}

/// Opens a spool file for reading: never waits (a FIFO opens at once), never follows a
/// link, and refuses anything but a regular file.
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::open(path, flags, Mode::empty())?);
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// The first bytes of a file, enough for its first two lines (at most `MAX_META`).
pub fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(8192);
    let file = open_regular(path)?;
    let mut taken = file.take(MAX_META as u64);
    let mut chunk = [0u8; 8192];
    loop {
        let n = taken.read(&mut chunk)?;
        head.extend_from_slice(&chunk[..n]);
        if n == 0 || head.iter().filter(|&&b| b == b'\n').count() >= 2 {
            return Ok(head);
        }
    }
}

/// Moves a file that cannot be read back to `damaged/`, out of the way, for the operator.
pub fn set_aside(layout: &Layout, path: &Path, name: &str, why: &str) {
    let to = layout.damaged.join(name);
    let moved = std::fs::rename(path, &to);
    tracing::error!(
        target: "mailsluice::spool",
        file = %path.display(),
        moved_to = %to.display(),
        moved = moved.is_ok(),
        error = why,
        "spool.damaged: a held message's file cannot be read back; set aside"
    );
}
