//! What starting the relay reads and checks before it touches the network: the config (its
//! environment variables among it), each upstream's forwarder (its password variable, its
//! resolver's settings), the TLS certificate and key (their files, that they match, a key
//! rustls takes: an RSA key under 2048 bits is refused). One function, run by `serve` and by
//! `check`, so that a config `check` passes is one that starts: only binding the sockets and
//! reaching upstream, Redis and SQS are left to the start. `check` also opens `[spool]` as
//! the start will ([`check_spool`]: made, locked, written, its free space; on S3 and SQS a
//! probe written), in the start's words; the start opens it for good inside its runtime.

use std::path::Path;
use std::sync::Arc;

use crate::config::{Config, ConfigError, UpstreamKind};
use crate::inbound::tls::{Tls, TlsError};
use crate::spool::{Spool, SpoolError};
use crate::upstream::ses::role;
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
    /// The start's own words (`main`'s context for the same error).
    #[error("opening [spool]: {0}")]
    Spool(SpoolError),
    /// `check`'s runtime for the s3 store's probe.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

/// Reads the config at `path` and everything starting builds from it that needs no network.
pub fn prepare(path: &Path) -> Result<Prepared, StartupError> {
    let config = Arc::new(Config::load(path).map_err(StartupError::Config)?);
    let upstreams = Upstreams::from_config(&config).map_err(StartupError::Upstreams)?;
    let tls = (config.smtp.tls.as_ref().map(Tls::load).transpose()).map_err(StartupError::Tls)?;
    let mut warnings = config.warnings();
    let ses = (config.upstreams.iter()).any(|u| matches!(u.kind, UpstreamKind::Ses(_)));
    warnings.extend(role::placeholder_in_env().filter(|_| ses));
    Ok(Prepared {
        warnings,
        config,
        upstreams,
        tls,
    })
}

/// Opens `config`'s `[spool]`, if any, as the start will and lets it go: the warning the start
/// would log of it, if any. On S3 and SQS: a probe object written and deleted, the queue read
/// (the start itself only logs a store that does not answer: `/readyz` says it).
pub fn check_spool(config: &Config) -> Result<Option<String>, StartupError> {
    let Some(spool) = &config.spool else {
        return Ok(None);
    };
    if spool.s3().is_some() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(StartupError::Runtime)?;
        runtime
            .block_on(Spool::check_s3(spool))
            .map_err(StartupError::Spool)?;
        return Ok(None);
    }
    Spool::check(spool).map_err(StartupError::Spool)
}
