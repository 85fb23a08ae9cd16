//! What `[redis]` and the layers that use it must satisfy: a section for every redis layer,
//! names and a prefix that stay inside Redis's hash tags, exact Lua arithmetic, one way to
//! the primary, URLs Redis takes.

use toml::Spanned;

use super::{host_port, RedisConfig, SentinelConfig};
use crate::config::{BrokenRule, Config, Refill, StoreKind, ThrottleConfig};

/// The rules of `[redis]` and of the layers that use it.
#[derive(Debug, thiserror::Error)]
pub enum RedisRule {
    #[error(
        "layer `{0}` has store = \"redis\" but there is no [redis] section (add one with \
         `url = \"redis://host:6379\"`)"
    )]
    NoRedisSection(String),
    #[error("a redis layer's name cannot contain `{{` or `}}`")]
    BracesInLayerName,
    #[error(
        "layer `{0}`: burst × interval is too large for the redis store (it must stay below \
         2^53 microsecond-tokens); lower the burst or the interval"
    )]
    InexactInLua(String),
    #[error(
        "the sentinels name the primary; give `sentinel` or `url` (or `cluster = true` with \
         `urls`), not both"
    )]
    SentinelAndUrl,
    #[error("the name of the primary is empty")]
    NoPrimaryName,
    #[error("name at least one sentinel")]
    NoSentinels,
    #[error("`{0}` is not host:port")]
    NotHostPort(String),
    #[error("environment variable `{0}` is not set")]
    EnvNotSet(String),
    #[error("the [redis] section needs `url` (or `urls` with `cluster = true`, or `sentinel`)")]
    NoUrl,
    #[error("several seed URLs are for `cluster = true`; use `url`")]
    SeedsWithoutCluster,
    /// `error` is the redis crate's reason; none when it took the URL but the scheme is
    /// another (`http://`).
    #[error(
        "`{url}` is not a redis://, rediss:// or unix:// URL ({})",
        error.as_ref().map_or("unknown scheme".to_string(), ToString::to_string)
    )]
    NotRedisUrl {
        url: String,
        error: Option<::redis::RedisError>,
    },
    #[error("cannot contain `{{` or `}}`")]
    BracesInPrefix,
}

/// The `[redis]` rules and those of the layers that use it.
pub(crate) fn validate(config: &Config, text: &str) -> Result<(), BrokenRule> {
    let redis_layers = config
        .throttle
        .iter()
        .filter(|l| l.store == StoreKind::Redis);
    for layer in redis_layers {
        validate_layer(layer, config.redis.as_ref(), text)?;
    }
    match &config.redis {
        Some(redis) => validate_section(redis, text),
        None => Ok(()),
    }
}

fn validate_layer(
    layer: &ThrottleConfig,
    redis: Option<&RedisConfig>,
    text: &str,
) -> Result<(), BrokenRule> {
    let broken = |key, problem| Err(BrokenRule::at(text, layer.name.span(), key, problem));
    if redis.is_none() {
        let problem = RedisRule::NoRedisSection(layer.name().to_string());
        return broken("throttle.store", problem);
    }
    if layer.name().contains(['{', '}']) {
        return broken("throttle.name", RedisRule::BracesInLayerName);
    }
    match exact_in_lua(layer) {
        true => Ok(()),
        false => broken(
            "throttle.burst",
            RedisRule::InexactInLua(layer.name().to_string()),
        ),
    }
}

fn validate_section(redis: &RedisConfig, text: &str) -> Result<(), BrokenRule> {
    let urls: Vec<&Spanned<String>> = redis.url.iter().chain(&redis.urls).collect();
    if let Some(sentinel) = &redis.sentinel {
        let span = sentinel.span();
        if !urls.is_empty() || redis.cluster {
            return Err(BrokenRule::at(
                text,
                span,
                "redis.sentinel",
                RedisRule::SentinelAndUrl,
            ));
        }
        check_sentinel(sentinel.get_ref(), text, span.clone())?;
        return check_common(redis, text, span);
    }
    let Some(first) = urls.first() else {
        return Err(BrokenRule::unlocated("redis.url", RedisRule::NoUrl));
    };
    if !redis.cluster && urls.len() > 1 {
        return Err(BrokenRule::at(
            text,
            urls[1].span(),
            "redis.urls",
            RedisRule::SeedsWithoutCluster,
        ));
    }
    for url in &urls {
        check_url(url.get_ref()).map_err(|e| BrokenRule::at(text, url.span(), "redis.url", e))?;
    }
    check_common(redis, text, first.span())
}

/// The keys every form of `[redis]` has; `span` locates an error with no key of its own.
fn check_common(
    redis: &RedisConfig,
    text: &str,
    span: std::ops::Range<usize>,
) -> Result<(), BrokenRule> {
    if let Some(var) = &redis.password_env {
        if std::env::var_os(var.get_ref()).is_none() {
            return Err(BrokenRule::at(
                text,
                var.span(),
                "redis.password_env",
                RedisRule::EnvNotSet(var.get_ref().clone()),
            ));
        }
    }
    if redis.prefix.contains(['{', '}']) {
        return Err(BrokenRule::at(
            text,
            span,
            "redis.prefix",
            RedisRule::BracesInPrefix,
        ));
    }
    Ok(())
}

fn check_url(url: &str) -> Result<(), RedisRule> {
    let scheme_ok = ["redis://", "rediss://", "unix://", "redis+unix://"]
        .iter()
        .any(|s| url.starts_with(s));
    let parsed = ::redis::IntoConnectionInfo::into_connection_info(url);
    if scheme_ok && parsed.is_ok() {
        return Ok(());
    }
    Err(RedisRule::NotRedisUrl {
        url: url.to_string(),
        error: parsed.err(),
    })
}

/// The Redis scripts compute in Lua numbers, doubles, exact for integers below 2^53; unix
/// microseconds take about 2^51 of that. A drip bucket's scaled time line needs
/// `capacity * interval` (with the interval reduced by its common factor with the limit);
/// a window or ttl is added to now. Whether the layer's numbers fit: one whose numbers do not
/// is refused when the file is read, so the store never computes an inexact bucket.
fn exact_in_lua(layer: &ThrottleConfig) -> bool {
    const EXACT: u128 = 1 << 53;
    let micros = |ms: u64| u128::from(ms) * 1000;
    let (widest, period) = match layer.refill {
        Refill::Drip => {
            let (limit, interval) = (
                u128::from(layer.limit.get()),
                micros(layer.interval_ms.get()),
            );
            // An adaptive layer's limit changes, so its numbers are not reduced.
            let g = match layer.adaptive_floor() {
                Some(_) => 1,
                None => gcd(limit, interval),
            };
            let (reduced_limit, reduced_interval) = (limit / g, interval / g);
            let widest = (u128::from(layer.burst()) * reduced_interval + reduced_limit) * 2;
            (widest, reduced_limit)
        }
        Refill::FixedWindow => (
            u128::from(layer.limit.get()) + (1 << 52),
            micros(layer.interval_ms.get()),
        ),
        Refill::None => (
            u128::from(layer.burst()) + (1 << 52),
            micros(layer.idle_ttl_ms.get()),
        ),
    };
    widest < EXACT && period < (1 << 52)
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The sentinel's own keys; `span` is the `sentinel` key's, which holds them all.
fn check_sentinel(
    sentinel: &SentinelConfig,
    text: &str,
    span: std::ops::Range<usize>,
) -> Result<(), BrokenRule> {
    let broken = |key, problem| Err(BrokenRule::at(text, span.clone(), key, problem));
    if sentinel.master.is_empty() {
        return broken("redis.sentinel.master", RedisRule::NoPrimaryName);
    }
    if sentinel.nodes.is_empty() {
        return broken("redis.sentinel.nodes", RedisRule::NoSentinels);
    }
    if let Some(bad) = sentinel.nodes.iter().find(|n| host_port(n).is_none()) {
        return broken("redis.sentinel.nodes", RedisRule::NotHostPort(bad.clone()));
    }
    match &sentinel.password_env {
        Some(var) if std::env::var_os(var).is_none() => broken(
            "redis.sentinel.password_env",
            RedisRule::EnvNotSet(var.clone()),
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const BASE: &str = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://out\"\n";
    const LAYER: &str =
        "[[throttle]]\nname = \"t\"\nkey = \"none\"\nlimit = 5\nstore = \"redis\"\n";

    #[test]
    fn a_redis_layer_needs_a_redis_section() {
        let err = Config::parse(&format!("{BASE}{LAYER}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("throttle.store") && err.contains("[redis]"),
            "{err}"
        );
        assert!(err.contains("line 6"), "{err}");
    }

    #[test]
    fn redis_section_is_read_with_defaults() {
        let text = format!("{BASE}{LAYER}[redis]\nurl = \"redis://127.0.0.1:6379\"\n");
        let c = Config::parse(&text).unwrap();
        let r = c.redis.unwrap();
        assert_eq!(r.timeout_ms.get(), 1000);
        assert_eq!(r.on_error, crate::config::OnError::Local);
        assert_eq!(r.prefix, "mailsluice:");
    }

    #[test]
    fn bad_urls_and_missing_env_are_named_with_their_line() {
        let text = format!("{BASE}[redis]\nurl = \"http://x\"\n");
        let err = Config::parse(&text).unwrap_err().to_string();
        assert!(err.contains("redis.url") && err.contains("line 6"), "{err}");
        let text = format!("{BASE}[redis]\nurls = [\"redis://a:1\", \"redis://b:2\"]\n");
        let err = Config::parse(&text).unwrap_err().to_string();
        assert!(err.contains("cluster = true"), "{err}");
        let text = format!(
            "{BASE}[redis]\nurl = \"redis://a:1\"\npassword_env = \"MAILSLUICE_NO_SUCH_VAR\"\n"
        );
        let err = Config::parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("password_env") && err.contains("line 7"),
            "{err}"
        );
        let text = format!(
            "{BASE}[redis]\ncluster = true\nurls = [\"redis://a:1\", \"redis://b:2\"]\non_error = \"reject\"\n"
        );
        assert!(Config::parse(&text).is_ok());
    }

    #[test]
    fn sentinel_is_read_and_its_errors_named_with_their_line() {
        let sentinel =
            "sentinel = { master = \"mymaster\", nodes = [\"127.0.0.1:26379\", \"s2:26380\"] }";
        let text = format!("{BASE}{LAYER}[redis]\n{sentinel}\n");
        let c = Config::parse(&text).unwrap();
        let s = c.redis.unwrap().sentinel.unwrap().into_inner();
        assert_eq!(s.master, "mymaster");
        let nodes: Vec<_> = s.nodes().collect();
        assert_eq!(nodes, [("127.0.0.1".into(), 26379), ("s2".into(), 26380)]);
        let cases = [
            (format!("url = \"redis://a:1\"\n{sentinel}"), "not both", 12),
            (format!("cluster = true\n{sentinel}"), "not both", 12),
            ("sentinel = { master = \"m\", nodes = [] }".into(), "at least one", 11),
            ("sentinel = { master = \"m\", nodes = [\"a\"] }".into(), "host:port", 11),
            ("sentinel = { master = \"\", nodes = [\"a:1\"] }".into(), "empty", 11),
            ("sentinel = { master = \"m\", nodes = [\"a:1\"], pw = \"x\" }".into(), "unknown field", 11),
            (
                "sentinel = { master = \"m\", nodes = [\"a:1\"], password_env = \"MAILSLUICE_NO_SUCH_VAR\" }".into(),
                "sentinel.password_env",
                11,
            ),
        ];
        for (section, why, line) in cases {
            let text = format!("{BASE}{LAYER}[redis]\n{section}\n");
            let err = Config::parse(&text).unwrap_err().to_string();
            assert!(err.contains(why), "{section}: {err}");
            assert!(err.contains("sentinel"), "{section}: {err}");
            assert!(err.contains(&format!("line {line}")), "{section}: {err}");
        }
    }

    #[test]
    fn a_redis_layer_too_large_for_exact_lua_numbers_is_refused() {
        let redis = "[redis]\nurl = \"redis://127.0.0.1:6379\"\n";
        let layer = |numbers: &str| {
            format!("{BASE}[[throttle]]\nname = \"t\"\nkey = \"none\"\n{numbers}\nstore = \"redis\"\n{redis}")
        };
        // 2^40 tokens a day: burst × interval in microseconds is far past 2^53.
        let err = Config::parse(&layer("limit = 1099511627776\ninterval_ms = 86400000"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("throttle.burst") && err.contains("2^53"),
            "{err}"
        );
        assert!(err.contains("line 6"), "{err}");
        assert!(Config::parse(&layer("limit = 14")).is_ok());
        // The same numbers are fine for a local layer.
        let local = layer("limit = 1099511627776\ninterval_ms = 86400000")
            .replace("store = \"redis\"\n", "");
        assert!(Config::parse(&local).is_ok());
    }
}
