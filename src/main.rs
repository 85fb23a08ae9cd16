//! The `mailsluice` command: parse the command line, load the config, bind, and run until
//! SIGTERM/SIGINT (SIGHUP reloads the config, see `reload`). Everything else is in the
//! library; the subcommands (`check`, `peek`, `hash-password`) are thin too.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use mailsluice::config::Config;
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(version, about = "SMTP relay proxy with per-tenant throttling")]
struct Cli {
    /// The configuration file.
    #[arg(
        long,
        global = true,
        env = "MAILSLUICE_CONFIG",
        default_value = "config/mailsluice.toml"
    )]
    config: PathBuf,
    /// Log lines for people (text) or for machines (json, one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the configuration and exit: 0 when valid, 1 with the key and line otherwise.
    Check,
    /// Print a bucket's allowance as JSON, taking nothing: `{"limit","remaining","reset",...}`.
    /// Asks the running relay's admin endpoint (`[admin] listen`).
    Peek {
        /// The layer's `name`.
        layer: String,
        /// The bucket's key (a tenant, a sender, ...; "" for `key = "none"`).
        key: String,
    },
    /// Read a password from standard input (up to its first newline) and print its argon2id
    /// hash, for `password_hash` in `[smtp.auth] users`.
    HashPassword,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_format);
    let result = match cli.command {
        Some(Command::Check) => check(&cli.config),
        Some(Command::Peek { ref layer, ref key }) => peek(&cli.config, layer, key),
        Some(Command::HashPassword) => hash_password(),
        None => serve(&cli.config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mailsluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        // Client-supplied values (key headers, names) quoted: they cannot forge fields.
        LogFormat::Text => builder
            .fmt_fields(mailsluice::observe::log_format::SafeFields)
            .init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn check(path: &std::path::Path) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    if let Some(tls) = &config.smtp.tls {
        mailsluice::inbound::tls::Tls::load(tls)?;
    }
    for warning in config.warnings() {
        eprintln!("{}: warning: {warning}", path.display());
    }
    println!("{}: ok", path.display());
    Ok(())
}

/// A redis layer is read from Redis itself (the shared state); a local layer lives in the
/// running relay, so it is asked through its admin endpoint.
fn peek(path: &std::path::Path, layer: &str, key: &str) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    let Some(spec) = config.layer(layer) else {
        anyhow::bail!("{}: no layer named {layer:?}", path.display());
    };
    if spec.store == mailsluice::config::StoreKind::Redis {
        let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
        let peek = runtime.block_on(async {
            let clock = Arc::new(mailsluice::throttle::TokioClock::new());
            let throttle = mailsluice::throttle::from_config(&config, clock);
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
        percent_encode(layer),
        percent_encode(key)
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

/// Path segment encoding for keys, which may hold anything a header may.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn hash_password() -> anyhow::Result<()> {
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
    let hash = mailsluice::inbound::password::hash(password)
        .map_err(|e| anyhow::anyhow!("hashing: {e}"))?;
    println!("{hash}");
    Ok(())
}

fn serve(path: &std::path::Path) -> anyhow::Result<()> {
    let config = Arc::new(Config::load(path)?);
    tokio::runtime::Runtime::new()
        .context("starting the async runtime")?
        .block_on(serve_async(config, path))
}

async fn serve_async(config: Arc<Config>, path: &std::path::Path) -> anyhow::Result<()> {
    for warning in config.warnings() {
        tracing::warn!("config: {warning}");
    }
    let upstreams = mailsluice::upstream::Upstreams::from_config(&config)
        .map_err(anyhow::Error::msg)
        .context("setting up the upstreams")?;
    let deps = mailsluice::Deps::new(config.clone(), upstreams)
        .with_tls()
        .context("loading [smtp.tls]")?;
    let mut listeners = mailsluice::Listeners {
        smtp: bind(&config.smtp.listen, "SMTP").await?,
        implicit_tls: bind(&config.smtp.tls_listen, "SMTP over implicit TLS").await?,
        admin: None,
    };
    if let Some(admin) = &config.admin {
        listeners.admin = Some(bind_admin(admin.listen).await?);
    }
    tokio::spawn(mailsluice::serve::reload::on_hangup(
        path.to_owned(),
        deps.live.clone(),
    ));
    let (trigger, shutdown) = mailsluice::state::shutdown::channel();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down: no new connections, finishing transactions in flight");
        trigger.trigger();
    });
    mailsluice::run(listeners, deps, shutdown).await;
    tracing::info!("stopped");
    Ok(())
}

async fn bind(addrs: &[std::net::SocketAddr], what: &str) -> anyhow::Result<Vec<TcpListener>> {
    let mut listeners = Vec::new();
    for addr in addrs {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("listening on {addr} for {what}"))?;
        let addr = listener.local_addr().context("reading the bound address")?;
        tracing::info!(%addr, "listening for {what}");
        listeners.push(listener);
    }
    Ok(listeners)
}

async fn bind_admin(addr: std::net::SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr} for [admin]"))?;
    tracing::info!(addr = %listener.local_addr()?, "admin endpoint listening");
    Ok(listener)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
