//! The subcommands besides serving: `check`, `peek` and `hash-password`. Each prints its
//! answer itself; an error comes back to `main`, which prints it and exits with 1. They are
//! at the command line's edge, so their errors are `anyhow`'s.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::config::{Config, StoreKind};
use crate::inbound::password;
use crate::inbound::tls::Tls;
use crate::throttle::{self, TokioClock};

/// Path segment encoding for keys, which may hold anything a header may: all but RFC 3986's
/// unreserved characters.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `check`: validates the config (and loads its certificate), prints its warnings and `ok`.
pub fn check(path: &Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    if let Some(tls) = &config.smtp.tls {
        Tls::load(tls)?;
    }
    for warning in config.warnings() {
        eprintln!("{}: warning: {warning}", path.display());
    }
    println!("{}: ok", path.display());
    Ok(())
}

/// `peek`: prints a bucket's allowance as JSON. A redis layer is read from Redis itself (the
/// shared state); a local layer lives in the running relay, so it is asked through its admin
/// endpoint.
pub fn peek(path: &Path, layer: &str, key: &str) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    let Some(spec) = config.layer(layer) else {
        anyhow::bail!("{}: no layer named {layer:?}", path.display());
    };
    if spec.store == StoreKind::Redis {
        let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
        let peek = runtime.block_on(async {
            let clock = Arc::new(TokioClock::new());
            let throttle = throttle::from_config(&config, clock);
            if let Some(Err(e)) = throttle.check_store().await {
                return Err(anyhow::anyhow!(e));
            }
            Ok(throttle.peek_async(layer, key).await)
        })?;
        let peek = peek.expect("layer exists").context("reading Redis")?;
        println!("{}", serde_json::to_string(&peek)?);
        return Ok(());
    }
    let admin = config
        .admin
        .as_ref()
        .context("peek asks the relay's admin endpoint: the config has no [admin] section")?;
    let url = format!(
        "http://{}/buckets/{}/{}",
        admin.listen,
        utf8_percent_encode(layer, PATH_SEGMENT),
        utf8_percent_encode(key, PATH_SEGMENT)
    );
    let body = ureq::get(&url)
        .call()
        .with_context(|| format!("asking {url} (is the relay running?)"))?
        .body_mut()
        .read_to_string()
        .context("reading the admin endpoint's answer")?;
    println!("{body}");
    Ok(())
}

/// `hash-password`: reads a password from standard input (up to its first newline) and
/// prints its argon2id hash.
pub fn hash_password() -> anyhow::Result<()> {
    use std::io::{BufRead, IsTerminal};
    if std::io::stdin().is_terminal() {
        eprint!("Password (shown as typed): ");
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("reading the password from standard input")?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    anyhow::ensure!(!password.is_empty(), "empty password on standard input");
    let hash = password::hash(password).map_err(|e| anyhow::anyhow!("hashing: {e}"))?;
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
