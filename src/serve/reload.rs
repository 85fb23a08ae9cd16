//! SIGHUP: a new configuration for new messages, without dropping anything. Connections and
//! waiters in flight keep the context they started with; a session moves to the newest one at
//! its next MAIL, and new connections start on it. An unusable new config is refused whole
//! and the old one stays in force. What cannot change in a running process (listeners,
//! connection bounds) is reported, not applied.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::inbound::tls::{Tls, TlsError};
use crate::state::context::{Context, Live, Setup};
use crate::upstream::Upstreams;

/// Why a new configuration was refused (the old one stays).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the relay is not running yet")]
    NotRunning,
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Upstream(#[from] crate::upstream::UpstreamsError),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Reads `path` again at every SIGHUP and puts it in force for new messages; a config that
/// does not load or cannot be used is refused with an error log, the old one staying.
pub async fn on_hangup(path: PathBuf, live: Arc<Live>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; the config will not be reloaded");
        return;
    };
    while hangup.recv().await.is_some() {
        let result = Config::load(&path)
            .map_err(ReloadError::from)
            .and_then(|config| reload(&live, config));
        match result {
            Ok(notes) => {
                tracing::info!(config = %path.display(), "SIGHUP: configuration reloaded");
                for note in notes {
                    tracing::warn!("SIGHUP: {note}");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "SIGHUP: new configuration refused, the old one stays")
            }
        }
    }
}

/// Puts `config` in force for new messages. Returns notes on what it could not change
/// (listeners need a restart).
pub fn reload(live: &Live, config: Config) -> Result<Vec<String>, ReloadError> {
    let old = live.current().ok_or(ReloadError::NotRunning)?;
    let notes = restart_notes(&old.setup.config, &config);
    let next = Arc::new(old.successor(setup(&old, config)?));
    next.setup.upstreams.start_learning();
    live.install(next);
    super::account::after_reload(live);
    Ok(notes)
}

/// The new setup for `config`, keeping what must outlive a reload: the buckets of unchanged
/// layers (a reload must not hand every tenant a full bucket again), unchanged upstreams with
/// their connections, and the certificate holder when the files are the same (it rereads
/// them).
fn setup(old: &Context, config: Config) -> Result<Setup, ReloadError> {
    let config = Arc::new(config);
    let upstreams = Upstreams::reloaded(&config, &old.setup.upstreams)?;
    let throttle = crate::throttle::from_config(&config, old.services.clock.clone())
        .keeping_unchanged(&old.setup.throttle);
    let tls = match (&config.smtp.tls, &old.setup.tls) {
        (None, _) => None,
        (Some(new), Some(tls)) if new.cert == tls.cert() && new.key == tls.key() => {
            tls.reload()?;
            Some(tls.clone())
        }
        (Some(new), _) => Some(Arc::new(Tls::load(new)?)),
    };
    Ok(Setup::new(
        config,
        Arc::new(upstreams),
        Arc::new(throttle),
        tls,
    ))
}

/// What a reload cannot change in a running process.
fn restart_notes(old: &Config, new: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    if old.smtp.listen != new.smtp.listen || old.smtp.tls_listen != new.smtp.tls_listen {
        notes.push("smtp.listen / smtp.tls_listen changed: takes effect after a restart".into());
    }
    if old.admin.as_ref().map(|a| a.listen) != new.admin.as_ref().map(|a| a.listen) {
        notes.push("[admin] listen changed: takes effect after a restart".into());
    }
    if old.smtp.max_connections != new.smtp.max_connections
        || old.smtp.max_connections_per_ip != new.smtp.max_connections_per_ip
    {
        notes.push("connection bounds changed: take effect after a restart".into());
    }
    if old.webhooks != new.webhooks {
        notes.push("[[webhook]] changed: takes effect after a restart".into());
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Webhooks are built at start: a changed `[[webhook]]` is logged as needing a restart.
    #[test]
    fn a_changed_webhook_needs_a_restart() {
        std::env::set_var("MAILSLUICE_TEST_RELOAD_WEBHOOK", "s");
        let config = |url: &str| {
            let text = format!(
                "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://out\"\n\
                 [reputation]\nkey = \"header:X-Tenant\"\n[[webhook]]\ntenant = \"*\"\n\
                 url = \"{url}\"\nsecret_env = \"MAILSLUICE_TEST_RELOAD_WEBHOOK\"\n"
            );
            Config::parse(&text).unwrap()
        };
        let old = config("https://a.example.com/");
        assert!(restart_notes(&old, &config("https://a.example.com/")).is_empty());
        let notes = restart_notes(&old, &config("https://b.example.com/"));
        assert_eq!(notes, ["[[webhook]] changed: takes effect after a restart"]);
    }
}
