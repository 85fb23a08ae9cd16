//! The `mailsluice` command: parse the command line, load the config, bind, and run until
//! SIGTERM/SIGINT (SIGHUP reloads the config, see `serve::reload`). Everything else is in the
//! library, the other subcommands (`check`, `peek`, `hash-password`) in `serve::commands`,
//! `spool` in `serve::spool_command`.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use mailsluice::serve::commands;
use mailsluice::serve::spool_command::{self, SpoolArgs};
use mailsluice::serve::startup::{self, Prepared};
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(version, about = "SMTP relay proxy with per-tenant throttling")]
struct Cli {
    /// The configuration file.
    #[arg(
        long,
        env = "MAILSLUICE_CONFIG",
        default_value = "config/mailsluice.toml"
    )]
    config: PathBuf,
    /// Log lines for people (text) or for machines (json, one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Threads that run the sessions; by default one per core. One costs the least CPU a
    /// message (no wake-ups between threads) and serves what one core can.
    #[arg(long, env = "MAILSLUICE_WORKERS")]
    workers: Option<NonZeroUsize>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate the configuration and everything starting would read (environment variables,
    /// certificates, files), without the network, and exit: 0 when it would start, 1 with
    /// the key and line otherwise.
    Check {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Print a bucket's allowance as JSON, taking nothing: `{"limit","remaining","reset",...}`:
    /// `limit` is the bucket's size (its burst), `reset` the Unix time a fixed window is full
    /// again (0 otherwise). Asks the running relay's admin endpoint (`[admin] listen`).
    Peek {
        /// The layer's `name`.
        layer: String,
        /// The bucket's key (a tenant, a sender, ...; "" for `key = "none"`).
        key: String,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Read a password from standard input (up to its first newline) and print its argon2id
    /// hash, for `password_hash` in `[smtp.auth] users`.
    HashPassword,
    /// Work a running relay's spool through its admin endpoint, as `postqueue` and `postsuper`
    /// work Postfix's queue: list, show, release, delete, requeue; hold and unhold a key.
    Spool(SpoolArgs),
}

/// `--config` after a subcommand that reads the config (`check --config PATH`); given before
/// it, or in `MAILSLUICE_CONFIG`, it is the top level's. Only those subcommands take it:
/// `hash-password` reads none.
#[derive(clap::Args)]
struct ConfigArg {
    /// The configuration file (default: the one before the subcommand, or
    /// `MAILSLUICE_CONFIG`, or config/mailsluice.toml).
    #[arg(long = "config")]
    path: Option<PathBuf>,
}

impl ConfigArg {
    fn or<'a>(&'a self, top: &'a Path) -> &'a Path {
        self.path.as_deref().unwrap_or(top)
    }
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
        Some(Command::Check { ref config }) => {
            commands::check(config.or(&cli.config)).map_err(Into::into)
        }
        Some(Command::Peek {
            ref layer,
            ref key,
            ref config,
        }) => commands::peek(config.or(&cli.config), layer, key).map_err(Into::into),
        Some(Command::HashPassword) => commands::hash_password().map_err(Into::into),
        Some(Command::Spool(ref args)) => spool_command::run(args, &cli.config).map_err(Into::into),
        None => serve(&cli.config, cli.workers),
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

fn serve(path: &std::path::Path, workers: Option<NonZeroUsize>) -> anyhow::Result<()> {
    // Every check that needs no network, before the runtime: the same as `check`.
    let prepared = startup::prepare(path)?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if let Some(workers) = workers {
        runtime.worker_threads(workers.get());
    }
    runtime
        .build()
        .context("starting the async runtime")?
        .block_on(serve_async(prepared, path))
}

async fn serve_async(prepared: Prepared, path: &std::path::Path) -> anyhow::Result<()> {
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(workers, "runtime started");
    let stop = stop_signals().context("installing the SIGTERM and SIGINT handlers")?;
    for warning in &prepared.warnings {
        tracing::warn!("config: {warning}");
    }
    let config = prepared.config.clone();
    let mut deps = mailsluice::Deps::new(prepared.config, prepared.upstreams);
    deps.setup.tls = prepared.tls.map(Arc::new);
    let deps = deps.with_spool().await.context("opening [spool]")?;
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
        stop.await;
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

/// SIGTERM or SIGINT, whichever comes first. The handlers are in place when this returns,
/// before the relay listens: a signal that comes while the start goes on then drains it,
/// rather than killing it (the default action of a signal with no handler yet).
fn stop_signals() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
