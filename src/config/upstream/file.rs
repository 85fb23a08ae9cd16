//! `file://DIR`: one `.eml` and one `.json` per message, the embedded default. No keys of its
//! own.

use std::path::PathBuf;

use super::UpstreamUrlError;

/// Where the messages are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileUpstream {
    pub dir: PathBuf,
}

impl FileUpstream {
    pub(super) fn from_url(rest: &str) -> Result<FileUpstream, UpstreamUrlError> {
        match rest.is_empty() {
            true => Err(UpstreamUrlError::NoDirectory),
            false => Ok(FileUpstream { dir: rest.into() }),
        }
    }
}

impl std::fmt::Display for FileUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "file://{}", self.dir.display())
    }
}
