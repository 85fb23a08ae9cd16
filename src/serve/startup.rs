//! What starting the relay reads and checks before it touches the network: the config (its
//! environment variables among it), each upstream's forwarder (its password variable, its
//! resolver's settings), the TLS certificate and key (their files, that they match, a key
//! rustls takes: an RSA key under 2048 bits is refused). One function, run by `serve` and by
//! `check`, so that a config `check` passes is one that starts: only binding the sockets and
//! reaching upstream, Redis and SQS are left to the start.

use std::path::Path;
use std::sync::Arc;

use crate::config::{Config, ConfigError};
use crate::inbound::tls::{Tls, TlsError};
use crate::upstream::{Upstreams, UpstreamsError};

/// What starting needs from the files and the environment, read and checked.
pub struct Prepared {
    pub config: Arc<Config>,
    pub upstreams: Upstreams,
    /// `[smtp.tls]`'s certificate and key, loaded; `None` without the section.
    pub tls: Option<Tls>,
    /// What is valid but probably not meant (a set of routes with no catch-all).
    pub warnings: Vec<String>,
}

/// Why the relay would not start; the text names the key or the file. Each says its cause in
/// its text and has no `source`: `main` prints the whole chain, which would say it twice.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("{0}")]
    Config(ConfigError),
    #[error("setting up the upstreams: {0}")]
    Upstreams(UpstreamsError),
    #[error("loading [smtp.tls]: {0}")]
    Tls(TlsError),
}

/// Reads the config at `path` and everything starting builds from it that needs no network.
pub fn prepare(path: &Path) -> Result<Prepared, StartupError> {
    let config = Arc::new(Config::load(path).map_err(StartupError::Config)?);
    let upstreams = Upstreams::from_config(&config).map_err(StartupError::Upstreams)?;
    let tls = (config.smtp.tls.as_ref().map(Tls::load).transpose()).map_err(StartupError::Tls)?;
    Ok(Prepared {
        warnings: config.warnings(),
        config,
        upstreams,
        tls,
    })
}
