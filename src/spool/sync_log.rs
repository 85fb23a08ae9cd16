//! What the tests see of the spool's durability: each file sync, rename into `held/` and
//! directory sync, in the order they happened. A crash test cannot see a missing sync (the
//! page cache outlives a killed process), so the tests read this log instead. It exists only
//! in the crate's own tests (`cfg(test)`): the release build has no log and no cost.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One step towards a durable file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A file's data synced.
    File(PathBuf),
    /// A file renamed to this path.
    Renamed(PathBuf),
    /// A directory's sync began (what was renamed into it before is covered).
    DirBegun(PathBuf),
    /// That sync ended without an error.
    DirSynced(PathBuf),
}

/// Every step of every spool in this test process (each test has its own directory).
static STEPS: Mutex<Vec<Step>> = Mutex::new(Vec::new());

pub fn record(step: Step) {
    STEPS.lock().unwrap_or_else(|e| e.into_inner()).push(step);
}

/// The steps so far whose path is under `root`, in order.
pub fn under(root: &Path) -> Vec<Step> {
    let steps = STEPS.lock().unwrap_or_else(|e| e.into_inner());
    (steps.iter())
        .filter(|step| {
            let (Step::File(p) | Step::Renamed(p) | Step::DirBegun(p) | Step::DirSynced(p)) = step;
            p.starts_with(root)
        })
        .cloned()
        .collect()
}
