//! `mailsluice spool`: a running relay's spool, worked through its admin endpoint as
//! `postqueue` and `postsuper` work Postfix's queue: `list` (`postqueue -p`), `show`,
//! `release` (`postqueue -f`, `-i`), `delete` (`postsuper -d`), `requeue` (`postsuper -r`),
//! `hold` and `unhold` a key (`postsuper -h`, `-H`). It asks the endpoint (`admin::spool`)
//! and prints the answer: a table for people (`table`), or the endpoint's JSON as it came
//! (`--json`) for scripts. The endpoint is `--admin URL`, else the config's `[admin] listen`,
//! else `http://127.0.0.1:9325` when there is no config file; the password is
//! `MAILSLUICE_ADMIN_PASSWORD`'s. Usage errors exit 2 (clap's), a refusal 1 with the
//! endpoint's words.

mod table;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;

use crate::config::AdminConfig;

/// The variable the admin password is read from (HTTP Basic, user `admin`).
pub const PASSWORD_VAR: &str = "MAILSLUICE_ADMIN_PASSWORD";

/// How long one request may take: an operator's command, never a wait for the spool.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Path segment encoding for ids and keys (a key may hold anything a header may).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `mailsluice spool ...`: where the endpoint is, how to print, and what to do.
#[derive(Debug, clap::Args)]
pub struct SpoolArgs {
    /// The running relay's admin endpoint, `http://HOST:PORT` (default: the config's
    /// `[admin] listen`, or http://127.0.0.1:9325 without a config file). The password, when
    /// the endpoint has one, is read from MAILSLUICE_ADMIN_PASSWORD.
    #[arg(long, global = true, value_name = "URL", value_parser = base_url)]
    pub admin: Option<String>,
    /// Print the endpoint's JSON answer as it came, for scripts.
    #[arg(long, global = true)]
    pub json: bool,
    /// The configuration file its `[admin] listen` is read from (default: the one before the
    /// subcommand, or MAILSLUICE_CONFIG, or config/mailsluice.toml).
    #[arg(long = "config", global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: SpoolCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SpoolCommand {
    /// List the messages held and failed, by key in their order (as `postqueue -p`).
    List {
        /// Only this key's messages: its layer and key, `LAYER/KEY`.
        #[arg(long, value_name = "LAYER/KEY")]
        key: Option<KeyArg>,
        /// Only the failed messages (given up with no report, kept for an operator).
        #[arg(long)]
        failed: bool,
    },
    /// One message: its key, state, envelope, attempts and upstream's last answer.
    Show { id: String },
    /// Try messages now, still charged to their buckets (as `postqueue -i`, `-f`): one, a key's
    /// (a stopped key is let go too, as `unhold`), or every key's not stopped. A failed
    /// message named by its id is put back first.
    Release(#[command(flatten)] ReleaseTarget),
    /// Remove messages for good (as `postsuper -d`): one, or all of a key's; never one being
    /// released (waiting for its tokens or with upstream).
    Delete(#[command(flatten)] DeleteTarget),
    /// Put failed messages back in their key's queue, to be tried now (as `postsuper -r`).
    Requeue(#[command(flatten)] RequeueTarget),
    /// Stop releasing a key's messages (as `postsuper -h`); new ones are still held. Kept
    /// across restarts of the relay.
    Hold {
        #[arg(value_name = "LAYER/KEY")]
        key: KeyArg,
    },
    /// Let a stopped key's messages go again, its first one now (as `postsuper -H`).
    Unhold {
        #[arg(value_name = "LAYER/KEY")]
        key: KeyArg,
    },
}

#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct ReleaseTarget {
    /// The message's id (the `queued as` id its client was told).
    id: Option<String>,
    /// Every message of this key, `LAYER/KEY`.
    #[arg(long, value_name = "LAYER/KEY")]
    key: Option<KeyArg>,
    /// Every key's messages waiting out a backoff, stopped keys apart.
    #[arg(long)]
    all: bool,
}

#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct DeleteTarget {
    /// The message's id.
    id: Option<String>,
    /// Every message of this key, held or failed, `LAYER/KEY`.
    #[arg(long, value_name = "LAYER/KEY")]
    key: Option<KeyArg>,
}

#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
pub struct RequeueTarget {
    /// The failed message's id.
    id: Option<String>,
    /// Every failed message.
    #[arg(long)]
    all: bool,
}

/// A hold-mode layer's name and a key in it, written `LAYER/KEY` (the key may hold `/`; it
/// is empty for `key = "none"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyArg {
    pub layer: String,
    pub key: String,
}

impl std::str::FromStr for KeyArg {
    type Err = BadKey;

    fn from_str(text: &str) -> Result<KeyArg, BadKey> {
        match text.split_once('/') {
            Some((layer, key)) if !layer.is_empty() => Ok(KeyArg {
                layer: layer.to_string(),
                key: key.to_string(),
            }),
            _ => Err(BadKey),
        }
    }
}

impl KeyArg {
    /// `/spool/keys/{layer}/{key}`.
    fn path(&self) -> String {
        format!(
            "/spool/keys/{}/{}",
            utf8_percent_encode(&self.layer, SEGMENT),
            utf8_percent_encode(&self.key, SEGMENT)
        )
    }
}

impl std::fmt::Display for KeyArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.layer, self.key)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("a key is written LAYER/KEY: the hold-mode layer's name, a slash, the key")]
pub struct BadKey;

/// Why `mailsluice spool` failed, in the words printed after `mailsluice: `.
#[derive(Debug, thiserror::Error)]
pub enum SpoolCommandError {
    #[error("{path}: {why}; or give --admin URL")]
    Config { path: String, why: String },
    #[error(
        "{path} has no [admin] section: the relay has no admin endpoint (give --admin URL if it \
         runs with another config)"
    )]
    NoAdmin { path: String },
    #[error("asking {url} (is the relay running?): {error}")]
    Ask { url: String, error: ureq::Error },
    #[error("{method} {url}: {status}: {words}")]
    Refused {
        method: &'static str,
        url: String,
        status: u16,
        words: String,
    },
    #[error("{url}: an answer that is not the spool's JSON: {body}")]
    Unreadable { url: String, body: String },
}

/// Runs `args`; `top_config` is the configuration file given before the subcommand.
pub fn run(args: &SpoolArgs, top_config: &Path) -> Result<(), SpoolCommandError> {
    let base = match &args.admin {
        Some(url) => url.clone(),
        None => admin_of(args.config.as_deref().unwrap_or(top_config))?,
    };
    let endpoint = Endpoint {
        base,
        password: std::env::var(PASSWORD_VAR).ok().filter(|p| !p.is_empty()),
        agent: ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build()
            .into(),
    };
    let (method, path) = request_of(&args.command);
    let answer = endpoint.ask(method, &path)?;
    if args.json {
        println!("{answer}");
    } else {
        print!("{}", table::render(&args.command, &answer));
    }
    Ok(())
}

/// The method and path that do `command`.
fn request_of(command: &SpoolCommand) -> (&'static str, String) {
    let id = |id: &str| format!("/spool/{}", utf8_percent_encode(id, SEGMENT));
    let failed = |failed: bool| if failed { "?failed" } else { "" };
    match command {
        SpoolCommand::List {
            key: None,
            failed: f,
        } => ("GET", format!("/spool/messages{}", failed(*f))),
        SpoolCommand::List {
            key: Some(k),
            failed: f,
        } => ("GET", format!("{}/messages{}", k.path(), failed(*f))),
        SpoolCommand::Show { id: i } => ("GET", id(i)),
        SpoolCommand::Release(t) => match (&t.id, &t.key) {
            (Some(i), _) => ("POST", format!("{}/release", id(i))),
            (None, Some(k)) => ("POST", format!("{}/release", k.path())),
            (None, None) => ("POST", "/spool/release".into()),
        },
        SpoolCommand::Delete(t) => match (&t.id, &t.key) {
            (Some(i), _) => ("DELETE", id(i)),
            (None, Some(k)) => ("DELETE", k.path()),
            (None, None) => unreachable!("clap asks for an id or --key"),
        },
        SpoolCommand::Requeue(t) => match &t.id {
            Some(i) => ("POST", format!("{}/requeue", id(i))),
            None => ("POST", "/spool/requeue".into()),
        },
        SpoolCommand::Hold { key } => ("POST", format!("{}/hold", key.path())),
        SpoolCommand::Unhold { key } => ("POST", format!("{}/release", key.path())),
    }
}

/// `URL` without its trailing slash; `http://` before a bare `HOST:PORT`. The endpoint speaks
/// plain HTTP (behind a proxy for anything else).
fn base_url(url: &str) -> Result<String, NotHttp> {
    let url = url.trim_end_matches('/');
    match url.split_once("://") {
        None => Ok(format!("http://{url}")),
        Some(("http", _)) => Ok(url.to_string()),
        Some(_) => Err(NotHttp),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the admin endpoint speaks plain HTTP: give http://HOST:PORT")]
pub struct NotHttp;

/// The admin endpoint of the config at `path`: its `[admin] listen` (a wildcard address
/// asked on loopback), read alone (the rest of the config, and the variables it names, are
/// the relay's business); the default's when there is no file.
fn admin_of(path: &Path) -> Result<String, SpoolCommandError> {
    let config = |why: String| SpoolCommandError::Config {
        path: path.display().to_string(),
        why,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(url_of(AdminConfig::default().listen));
        }
        Err(e) => return Err(config(e.to_string())),
    };
    let table: toml::Table = toml::from_str(&text).map_err(|e| config(e.to_string()))?;
    let Some(admin) = table.get("admin") else {
        return Err(SpoolCommandError::NoAdmin {
            path: path.display().to_string(),
        });
    };
    let listen = match admin.get("listen") {
        None => AdminConfig::default().listen,
        Some(value) => (value.as_str())
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| config(format!("[admin] listen is not an address: {value}")))?,
    };
    Ok(url_of(listen))
}

/// `http://ADDR`, a wildcard address replaced by loopback.
fn url_of(mut listen: SocketAddr) -> String {
    if listen.ip().is_unspecified() {
        listen.set_ip(match listen {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{listen}")
}

/// The admin endpoint, as the command asks it.
struct Endpoint {
    base: String,
    password: Option<String>,
    agent: ureq::Agent,
}

impl Endpoint {
    /// `METHOD path`: the JSON answered with a 2xx; a refusal with the endpoint's words.
    fn ask(&self, method: &'static str, path: &str) -> Result<Value, SpoolCommandError> {
        use base64::Engine;
        let url = format!("{}{path}", self.base);
        let mut request = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(password) = &self.password {
            let pair = format!("admin:{password}");
            let basic = base64::engine::general_purpose::STANDARD.encode(pair);
            request = request.header("Authorization", format!("Basic {basic}"));
        }
        let request = request.body(()).map_err(|e| SpoolCommandError::Ask {
            url: url.clone(),
            error: ureq::Error::Http(e),
        })?;
        let ask = |error| SpoolCommandError::Ask {
            url: url.clone(),
            error,
        };
        let mut response = self.agent.run(request).map_err(ask)?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().map_err(ask)?;
        let json = serde_json::from_str::<Value>(&body);
        if (200..300).contains(&status) {
            return json.map_err(|_| SpoolCommandError::Unreadable { url, body });
        }
        let words = match json.as_ref().ok().and_then(|j| j["error"].as_str()) {
            Some(error) => error.to_string(),
            None => body.trim().to_string(),
        };
        let words = match (status, &self.password) {
            (401, None) => format!("{words} (set {PASSWORD_VAR})"),
            _ => words,
        };
        Err(SpoolCommandError::Refused {
            method,
            url,
            status,
            words,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_its_layer_a_slash_and_the_rest() {
        let key: KeyArg = "tenant/a/b c".parse().unwrap();
        assert_eq!((key.layer.as_str(), key.key.as_str()), ("tenant", "a/b c"));
        assert_eq!(key.path(), "/spool/keys/tenant/a%2Fb%20c");
        let none: KeyArg = "all/".parse().unwrap();
        assert_eq!(none.key, "");
        assert!("acme".parse::<KeyArg>().is_err());
        assert!("/acme".parse::<KeyArg>().is_err());
    }

    #[test]
    fn the_endpoint_defaults_to_the_configs_listen_on_loopback() {
        let dir = std::env::temp_dir().join(format!("mailsluice-spool-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.toml");
        std::fs::write(&path, "[admin]\nlisten = \"0.0.0.0:9999\"\n").unwrap();
        assert_eq!(admin_of(&path).unwrap(), "http://127.0.0.1:9999");
        std::fs::write(&path, "[admin]\n").unwrap();
        assert_eq!(admin_of(&path).unwrap(), "http://127.0.0.1:9325");
        std::fs::write(&path, "[smtp]\n").unwrap();
        assert!(matches!(
            admin_of(&path),
            Err(SpoolCommandError::NoAdmin { .. })
        ));
        let missing = dir.join("missing.toml");
        assert_eq!(admin_of(&missing).unwrap(), "http://127.0.0.1:9325");
        assert_eq!(base_url("127.0.0.1:1/").unwrap(), "http://127.0.0.1:1");
        assert_eq!(base_url("http://[::1]:9").unwrap(), "http://[::1]:9");
        assert!(base_url("https://relay:9325").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
