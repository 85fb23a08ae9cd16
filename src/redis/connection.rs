//! Where Redis commands go, and how a connection follows the primary.
//!
//! - **One server** (`url`): a [`ConnectionManager`], which reconnects by itself.
//! - **Cluster** (`cluster = true`): the crate's cluster connection, which follows the slots.
//! - **Sentinel** (`sentinel = {...}`): the sentinels are asked which server is the primary of
//!   `master`, and a connection manager is made to it.
//!
//! How the relay follows a failover by itself:
//! - With Sentinel, the sentinels are asked again at most every [`REASK`], on a call: after a
//!   failover the old primary may go on answering, as a primary, until the sentinels demote it
//!   (and then its writes since the failover are lost), so an error alone would not do. A
//!   sentinel that does not answer leaves the connection in use as it is.
//! - After a failed call (one server or Sentinel) the connection is forgotten: the old primary
//!   may answer `READONLY` (demoted) or nothing, and a managed endpoint's DNS name may now
//!   point elsewhere. The next call (after its caller's pause) asks the sentinels again, or
//!   resolves the name again.

use std::sync::Mutex;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use ::redis::{Cmd, ConnectionAddr, ConnectionInfo, FromRedisValue, Pipeline, ScriptInvocation};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use super::error::RedisUnavailable;
use super::options::{RedisOptions, SentinelOptions};

/// How the primary is found.
enum Primary {
    /// A fixed address (or a DNS name, resolved again at each new connection).
    Server(::redis::Client),
    /// Asked of the sentinels at each new connection.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

/// How often, at most, the sentinels are asked where the primary is: the longest a relay
/// goes on writing to a primary that was failed over (while the sentinels still answer).
pub const REASK: Duration = Duration::from_secs(1);

/// The connection in use, with where it goes and when the sentinels last said so.
#[derive(Clone)]
struct Current {
    conn: ConnectionManager,
    addr: String,
    asked: Instant,
}

// One per store, made once: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
enum Kind {
    Primary {
        primary: Primary,
        /// The connection in use; `None` until the first call and after a failed one.
        current: Mutex<Option<Current>>,
    },
    Cluster {
        client: ::redis::cluster::ClusterClient,
        conn: OnceCell<ClusterConnection>,
    },
}

/// One call to Redis: a script, a command, or a pipeline of commands.
pub(crate) enum Call<'a> {
    Script(&'a ScriptInvocation<'a>),
    Cmd(&'a Cmd),
    Pipe(&'a Pipeline),
}

impl Call<'_> {
    async fn run<T: FromRedisValue>(
        &self,
        conn: &mut impl ::redis::aio::ConnectionLike,
    ) -> ::redis::RedisResult<T> {
        match self {
            Call::Script(inv) => inv.invoke_async(conn).await,
            Call::Cmd(cmd) => cmd.query_async(conn).await,
            Call::Pipe(pipe) => pipe.query_async(conn).await,
        }
    }
}

/// The way to Redis of one user of it (the throttle's store, the reputation guard's); see the
/// module doc.
pub(crate) struct Connection {
    kind: Kind,
    timeout: Duration,
}

impl Connection {
    /// Checks the options; connects lazily, on the first call.
    pub(crate) fn new(opts: &RedisOptions) -> Result<Connection, RedisUnavailable> {
        let kind = match &opts.sentinel {
            Some(sentinel) => Kind::Primary {
                primary: Primary::Sentinel(tokio::sync::Mutex::new(sentinel_client(
                    sentinel,
                    opts.password.as_deref(),
                )?)),
                current: Mutex::new(None),
            },
            None => server_or_cluster(opts)?,
        };
        Ok(Connection {
            kind,
            timeout: opts.timeout,
        })
    }

    /// Runs a script within the timeout (connecting, asking the sentinels and loading the
    /// script on `NOSCRIPT` included).
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
    ) -> Result<T, RedisUnavailable> {
        self.call(Call::Script(inv)).await
    }

    /// Runs a call within the timeout, connecting included.
    pub(crate) async fn call<T: FromRedisValue>(
        &self,
        call: Call<'_>,
    ) -> Result<T, RedisUnavailable> {
        let run = async {
            match &self.kind {
                Kind::Primary { primary, current } => {
                    let mut conn = self.primary(primary, current).await?;
                    let answer = call.run(&mut conn).await;
                    if answer.is_err() {
                        *current.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    }
                    Ok(answer?)
                }
                Kind::Cluster { client, conn } => {
                    let conn = conn
                        .get_or_try_init(|| async { client.get_async_connection().await })
                        .await?;
                    Ok(call.run(&mut conn.clone()).await?)
                }
            }
        };
        let answer = tokio::time::timeout(self.timeout, run).await;
        if answer.is_err() {
            // A primary that does not answer in time may be gone for good (failed over).
            if let Kind::Primary { current, .. } = &self.kind {
                *current.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
        answer.map_err(|_| RedisUnavailable::Timeout(self.timeout))?
    }

    /// The connection in use, or a new one to the primary as it is now.
    async fn primary(
        &self,
        primary: &Primary,
        current: &Mutex<Option<Current>>,
    ) -> Result<ConnectionManager, RedisUnavailable> {
        let now = Instant::now();
        let known = current.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let client = match (primary, known) {
            (Primary::Server(_), Some(known)) => return Ok(known.conn),
            (Primary::Sentinel(_), Some(known)) if now < known.asked + REASK => {
                return Ok(known.conn)
            }
            (Primary::Server(client), None) => client.clone(),
            (Primary::Sentinel(sentinels), known) => {
                let asked = sentinels.lock().await.async_get_client().await;
                match (asked, known) {
                    (Ok(client), Some(known)) if addr_of(&client) == known.addr => {
                        return Ok(remember(
                            current,
                            Current {
                                asked: now,
                                ..known
                            },
                        ));
                    }
                    (Ok(client), _) => client,
                    // The sentinels do not answer: the primary may well still be there.
                    (Err(_), Some(known)) => {
                        return Ok(remember(
                            current,
                            Current {
                                asked: now,
                                ..known
                            },
                        ));
                    }
                    (Err(e), None) => {
                        return Err(RedisUnavailable::Sentinels(e));
                    }
                }
            }
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50));
        let addr = addr_of(&client);
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        if matches!(primary, Primary::Sentinel(_)) {
            tracing::info!(target: "ratelimit", primary = %addr, "ratelimit.store_primary");
        }
        let asked = now;
        Ok(remember(current, Current { conn, addr, asked }))
    }
}

fn addr_of(client: &::redis::Client) -> String {
    format!("{:?}", client.get_connection_info().addr())
}

fn remember(current: &Mutex<Option<Current>>, new: Current) -> ConnectionManager {
    let conn = new.conn.clone();
    *current.lock().unwrap_or_else(|e| e.into_inner()) = Some(new);
    conn
}

/// The connection info of each URL, with the password of `password_env` if given.
fn infos(opts: &RedisOptions) -> Result<Vec<ConnectionInfo>, RedisUnavailable> {
    opts.urls
        .iter()
        .map(|url| {
            let info = ::redis::IntoConnectionInfo::into_connection_info(url.as_str())
                .map_err(|e| RedisUnavailable::Options(format!("redis url: {e}")))?;
            Ok(match &opts.password {
                Some(pw) => {
                    let settings = info.redis_settings().clone().set_password(pw);
                    info.set_redis_settings(settings)
                }
                None => info,
            })
        })
        .collect()
}

fn server_or_cluster(opts: &RedisOptions) -> Result<Kind, RedisUnavailable> {
    let infos = infos(opts)?;
    if opts.cluster {
        let mut b = ::redis::cluster::ClusterClient::builder(infos)
            .connection_timeout(opts.timeout)
            .response_timeout(opts.timeout)
            .retries(1);
        if let Some(pw) = &opts.password {
            b = b.password(pw);
        }
        let client = b.build().map_err(options)?;
        return Ok(Kind::Cluster {
            client,
            conn: OnceCell::new(),
        });
    }
    let [info] =
        <[_; 1]>::try_from(infos).map_err(|_| options("one url without cluster = true"))?;
    Ok(Kind::Primary {
        primary: Primary::Server(::redis::Client::open(info).map_err(options)?),
        current: Mutex::new(None),
    })
}

/// The sentinels of `sentinel`; `password` is the primary's (`password_env`), the sentinels'
/// own is `sentinel.password`.
fn sentinel_client(
    sentinel: &SentinelOptions,
    password: Option<&str>,
) -> Result<SentinelClient, RedisUnavailable> {
    let nodes =
        (sentinel.nodes.iter()).map(|(host, port)| ConnectionAddr::Tcp(host.clone(), *port));
    let mut b = SentinelClientBuilder::new(nodes, &sentinel.master, SentinelServerType::Master)
        .map_err(options)?;
    if let Some(pw) = password {
        b = b.set_client_to_redis_password(pw);
    }
    if let Some(pw) = &sentinel.password {
        b = b.set_client_to_sentinel_password(pw);
    }
    b.build().map_err(options)
}

/// Options that make no client: found before any call.
fn options(e: impl std::fmt::Display) -> RedisUnavailable {
    RedisUnavailable::Options(e.to_string())
}
