//! Where Redis is and how to reach it, as `[redis]` says: the one description that the
//! throttle's shared layers and the reputation guard each connect with.

use std::time::Duration;

use crate::config::RedisConfig;

/// Where a Redis connection goes, and how.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// One URL (`redis://`, `rediss://`, `unix://`), or the seed nodes of a cluster.
    pub urls: Vec<String>,
    pub cluster: bool,
    /// A password that is not in the URL (from `password_env`).
    pub password: Option<String>,
    /// Longest wait for one command, connecting included.
    pub timeout: Duration,
    /// Put in front of every key (`mailsluice:`).
    pub prefix: String,
    /// Redis Sentinel: `urls` is then empty, the primary is asked of the sentinels.
    pub sentinel: Option<SentinelOptions>,
}

/// The sentinels that know where the primary is.
#[derive(Debug, Clone)]
pub struct SentinelOptions {
    /// The name the sentinels monitor the primary under.
    pub master: String,
    /// The sentinels, `(host, port)`.
    pub nodes: Vec<(String, u16)>,
    /// The sentinels' own password, if they ask for one.
    pub password: Option<String>,
}

/// The options of `[redis]`; the passwords read from their `password_env` (checked at load).
pub fn redis_options(redis: &RedisConfig) -> RedisOptions {
    RedisOptions {
        urls: redis.urls().map(str::to_string).collect(),
        cluster: redis.cluster,
        password: (redis.password_env.as_ref()).and_then(|v| std::env::var(v.get_ref()).ok()),
        timeout: Duration::from_millis(redis.timeout_ms.get()),
        prefix: redis.prefix.clone(),
        sentinel: redis.sentinel.as_ref().map(|s| {
            let s = s.get_ref();
            SentinelOptions {
                master: s.master.clone(),
                nodes: s.nodes().collect(),
                password: (s.password_env.as_ref()).and_then(|v| std::env::var(v).ok()),
            }
        }),
    }
}
