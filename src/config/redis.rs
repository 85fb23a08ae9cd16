//! `[redis]`: the shared store of the layers with `store = "redis"` (several replicas, one
//! limit). Kept apart from the rest of the schema because only those layers need it.

use std::num::NonZeroU64;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::{located, Config, StoreKind};
use crate::throttle::store::redis::{layer_fits, RedisOptions};
use crate::throttle::OnError;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[user:password@]host:port[/db]`, `rediss://...` (TLS) or `unix:///path`.
    pub url: Option<Spanned<String>>,
    /// Redis Cluster: `urls` are seed nodes (any few of the cluster's).
    #[serde(default)]
    pub cluster: bool,
    #[serde(default)]
    pub urls: Vec<Spanned<String>>,
    /// Name of the environment variable holding the password (instead of in the URL).
    pub password_env: Option<Spanned<String>>,
    /// Longest wait for one Redis command, connecting included; past it, `on_error` answers.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: NonZeroU64,
    #[serde(default)]
    pub on_error: OnErrorConfig,
    /// Put in front of every key, so several deployments can share one Redis.
    #[serde(default = "default_prefix")]
    pub prefix: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnErrorConfig {
    #[default]
    Local,
    Reject,
    Allow,
}

fn default_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(1000).unwrap()
}
fn default_prefix() -> String {
    "mailsluice:".into()
}

impl RedisConfig {
    pub fn on_error(&self) -> OnError {
        match self.on_error {
            OnErrorConfig::Local => OnError::Local,
            OnErrorConfig::Reject => OnError::Reject,
            OnErrorConfig::Allow => OnError::Allow,
        }
    }

    /// The store's options; the password read from `password_env` (checked by `validate`).
    pub fn options(&self) -> RedisOptions {
        let mut urls: Vec<String> = self.url.iter().map(|u| u.get_ref().clone()).collect();
        urls.extend(self.urls.iter().map(|u| u.get_ref().clone()));
        RedisOptions {
            urls,
            cluster: self.cluster,
            password: (self.password_env.as_ref()).and_then(|v| std::env::var(v.get_ref()).ok()),
            timeout: Duration::from_millis(self.timeout_ms.get()),
            prefix: self.prefix.clone(),
        }
    }
}

/// The `[redis]` rules and those of the layers that use it.
pub(super) fn validate(config: &Config, text: &str) -> Result<(), String> {
    for layer in config
        .throttle
        .iter()
        .filter(|l| l.store == StoreKind::Redis)
    {
        let span = layer.name.span();
        let Some(redis) = &config.redis else {
            return Err(located(
                text,
                span,
                &format!(
                    "key `throttle.store`: layer `{}` has store = \"redis\" but there is no \
                     [redis] section (add one with `url = \"redis://host:6379\"`)",
                    layer.name.get_ref()
                ),
            ));
        };
        if layer.name.get_ref().contains(['{', '}']) {
            return Err(located(
                text,
                span,
                "key `throttle.name`: a redis layer's name cannot contain `{` or `}`",
            ));
        }
        layer_fits(&redis.prefix, &layer.spec())
            .map_err(|e| located(text, span, &format!("key `throttle.burst`: {e}")))?;
    }
    let Some(redis) = &config.redis else {
        return Ok(());
    };
    let urls: Vec<&Spanned<String>> = redis.url.iter().chain(&redis.urls).collect();
    let first = urls.first().map_or(0..0, |u| u.span());
    if urls.is_empty() {
        return Err(
            "key `redis.url`: the [redis] section needs `url` (or `urls` with `cluster = true`)"
                .into(),
        );
    }
    if !redis.cluster && urls.len() > 1 {
        return Err(located(
            text,
            urls[1].span(),
            "key `redis.urls`: several seed URLs are for `cluster = true`; use `url`",
        ));
    }
    for url in &urls {
        let u = url.get_ref();
        let scheme_ok = ["redis://", "rediss://", "unix://", "redis+unix://"]
            .iter()
            .any(|s| u.starts_with(s));
        let parsed = ::redis::IntoConnectionInfo::into_connection_info(u.as_str());
        if let (false, _) | (_, Err(_)) = (scheme_ok, &parsed) {
            let why = parsed
                .err()
                .map_or("unknown scheme".to_string(), |e| e.to_string());
            return Err(located(
                text,
                url.span(),
                &format!(
                    "key `redis.url`: `{u}` is not a redis://, rediss:// or unix:// URL ({why})"
                ),
            ));
        }
    }
    if let Some(var) = &redis.password_env {
        if std::env::var_os(var.get_ref()).is_none() {
            return Err(located(
                text,
                var.span(),
                &format!(
                    "key `redis.password_env`: environment variable `{}` is not set",
                    var.get_ref()
                ),
            ));
        }
    }
    if redis.prefix.contains(['{', '}']) {
        return Err(located(
            text,
            first,
            "key `redis.prefix`: cannot contain `{` or `}`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const BASE: &str = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://out\"\n";
    const LAYER: &str =
        "[[throttle]]\nname = \"t\"\nkey = \"none\"\nlimit = 5\nstore = \"redis\"\n";

    #[test]
    fn a_redis_layer_needs_a_redis_section() {
        let err = Config::parse(&format!("{BASE}{LAYER}")).unwrap_err();
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
        assert_eq!(r.on_error(), crate::throttle::OnError::Local);
        assert_eq!(r.options().prefix, "mailsluice:");
    }

    #[test]
    fn bad_urls_and_missing_env_are_named_with_their_line() {
        let text = format!("{BASE}[redis]\nurl = \"http://x\"\n");
        let err = Config::parse(&text).unwrap_err();
        assert!(err.contains("redis.url") && err.contains("line 6"), "{err}");
        let text = format!("{BASE}[redis]\nurls = [\"redis://a:1\", \"redis://b:2\"]\n");
        let err = Config::parse(&text).unwrap_err();
        assert!(err.contains("cluster = true"), "{err}");
        let text = format!(
            "{BASE}[redis]\nurl = \"redis://a:1\"\npassword_env = \"MAILSLUICE_NO_SUCH_VAR\"\n"
        );
        let err = Config::parse(&text).unwrap_err();
        assert!(
            err.contains("password_env") && err.contains("line 7"),
            "{err}"
        );
        let text = format!(
            "{BASE}[redis]\ncluster = true\nurls = [\"redis://a:1\", \"redis://b:2\"]\non_error = \"reject\"\n"
        );
        assert!(Config::parse(&text).is_ok());
    }
}
