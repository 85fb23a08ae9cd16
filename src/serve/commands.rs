//! The subcommands besides serving: `check`, `peek` and `hash-password`. Each prints its
//! answer itself; an error comes back to `main`, which prints it and exits with 1.

use std::path::Path;
use std::sync::Arc;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::startup::{check_spool, prepare, StartupError};
use crate::clock::TokioClock;
use crate::config::{Config, ConfigError, StoreKind};
use crate::inbound::password;
use crate::throttle::{self, StoreUnreachable};

/// Path segment encoding for keys, which may hold anything a header may: all but RFC 3986's
/// unreserved characters.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Why a subcommand failed, in the words printed after `mailsluice: `.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Boxed: the largest of these errors, and a rare one.
    #[error(transparent)]
    Startup(Box<StartupError>),
    #[error("{path}: no layer named {layer:?}")]
    NoLayer { path: String, layer: String },
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The shared store could not be reached.
    #[error("{0}")]
    Store(StoreUnreachable),
    #[error("reading Redis: {0}")]
    Redis(crate::throttle::ThrottleError),
    #[error("peek asks the relay's admin endpoint: the config has no [admin] section")]
    NoAdmin,
    #[error("asking {url} (is the relay running?): {error}")]
    Ask { url: String, error: ureq::Error },
    #[error("reading the admin endpoint's answer: {0}")]
    Answer(ureq::Error),
    #[error("reading the password from standard input: {0}")]
    Stdin(std::io::Error),
    #[error("empty password on standard input")]
    EmptyPassword,
    #[error("hashing: {0}")]
    Hash(argon2::password_hash::Error),
}

/// `check`: every check starting makes before the network (`startup::prepare`: the config,
/// its environment variables, the upstreams' setup, the certificate and key; then the spool
/// opened as the start opens it); prints the warnings and `ok`.
pub fn check(path: &Path) -> Result<(), CommandError> {
    let startup = |e| CommandError::Startup(Box::new(e));
    let prepared = prepare(path).map_err(startup)?;
    let spool = check_spool(&prepared.config).map_err(startup)?;
    for warning in prepared.warnings.into_iter().chain(spool) {
        eprintln!("{}: warning: {warning}", path.display());
    }
    println!("{}: ok", path.display());
    Ok(())
}

/// `peek`: prints a bucket's allowance as JSON. A redis layer is read from Redis itself (the
/// shared state); a local layer lives in the running relay, so it is asked through its admin
/// endpoint.
pub fn peek(path: &Path, layer: &str, key: &str) -> Result<(), CommandError> {
    let config = Config::load(path)?;
    let Some(spec) = config.layer(layer) else {
        return Err(CommandError::NoLayer {
            path: path.display().to_string(),
            layer: layer.to_string(),
        });
    };
    if spec.store == StoreKind::Redis {
        let runtime = tokio::runtime::Runtime::new().map_err(CommandError::Runtime)?;
        let peek = runtime.block_on(async {
            let clock = Arc::new(TokioClock::new());
            let throttle = throttle::from_config(&config, clock);
            if let Some(Err(e)) = throttle.check_store().await {
                return Err(CommandError::Store(e));
            }
            Ok(throttle.peek_async(layer, key).await)
        })?;
        let peek = peek.expect("layer exists").map_err(CommandError::Redis)?;
        println!(
            "{}",
            serde_json::to_string(&peek).expect("a peek is plain data")
        );
        return Ok(());
    }
    let admin = config.admin.as_ref().ok_or(CommandError::NoAdmin)?;
    let url = format!(
        "http://{}/buckets/{}/{}",
        admin.listen,
        utf8_percent_encode(layer, PATH_SEGMENT),
        utf8_percent_encode(key, PATH_SEGMENT)
    );
    let body = ureq::get(&url)
        .call()
        .map_err(|error| CommandError::Ask {
            url: url.clone(),
            error,
        })?
        .body_mut()
        .read_to_string()
        .map_err(CommandError::Answer)?;
    println!("{body}");
    Ok(())
}

/// `hash-password`: reads a password from standard input (up to its first newline) and
/// prints its argon2id hash.
pub fn hash_password() -> Result<(), CommandError> {
    use std::io::{BufRead, IsTerminal};
    if std::io::stdin().is_terminal() {
        eprint!("Password (shown as typed): ");
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(CommandError::Stdin)?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        return Err(CommandError::EmptyPassword);
    }
    let hash = password::hash(password).map_err(CommandError::Hash)?;
    println!("{hash}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_segment_keeps_only_unreserved_characters() {
        let encoded = utf8_percent_encode("acme/eu tenant~1_x.y-z@é%", PATH_SEGMENT).to_string();
        assert_eq!(encoded, "acme%2Feu%20tenant~1_x.y-z%40%C3%A9%25");
    }
}
