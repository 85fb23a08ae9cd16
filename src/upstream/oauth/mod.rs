//! The bearer tokens of an XOAUTH2 upstream (`auth = "xoauth2"`): asked of the provider's
//! token endpoint by the relay itself, kept until shortly before they expire, renewed in the
//! background as they near their end, so a message waits for a token only when there is none
//! to use (the first, or after the endpoint was down).
//!
//! - `grant`: what the endpoint is given (a client secret, a signed assertion, a service
//!   account's JWT for one mailbox).
//! - `endpoint`: the POST and its answer.
//! - `cache`: the tokens kept, one per mailbox or one for all, each asked for once at a time.
//!
//! Secrets (the client secret, the keys, the tokens) are never logged: a token's `Debug`
//! hides it, and an endpoint's refusal is shown by its `error` fields only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

mod cache;
mod endpoint;
mod grant;

use cache::Cache;
use endpoint::Endpoint;
use grant::Grant;

use crate::config::{OauthConfig, OauthKeyError};
use crate::upstream::client::ClientTlsError;

/// A token is used while it has this much life left: a connection logs in with it, and a
/// token about to expire could lapse on the way.
const USE_MARGIN: Duration = Duration::from_secs(60);

/// A token is renewed in the background once it has less than this left (a provider's
/// tokens live an hour or more), so messages keep finding a good one.
const RENEW_MARGIN: Duration = Duration::from_secs(300);

/// What a token lives when the endpoint does not say (both providers say an hour).
const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);

/// Why an XOAUTH2 upstream could not be set up (a secret missing, a key unreadable).
#[derive(Debug, thiserror::Error)]
pub enum OauthSetupError {
    #[error("upstream.oauth.client_secret_env: environment variable `{0}` is not set")]
    SecretEnv(String),
    #[error("upstream.oauth.key_env: environment variable `{0}` is not set")]
    KeyEnv(String),
    #[error("upstream.oauth key: {0}")]
    Key(String),
    #[error("upstream.oauth.token_url: {0}")]
    TokenUrl(OauthKeyError),
    #[error("upstream.oauth.token_url TLS: {0}")]
    Tls(ClientTlsError),
}

/// Why no token came.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    #[error("the token endpoint is unreachable: {0}")]
    Unreachable(String),
    #[error("the token endpoint did not answer within {0:?}")]
    TimedOut(Duration),
    #[error("the token endpoint answered {status} {error}{}", .description.as_ref().map(|d| format!(": {d}")).unwrap_or_default())]
    Refused {
        status: u16,
        error: String,
        description: Option<String>,
    },
    #[error("the token endpoint's answer is unreadable: {0}")]
    Unreadable(String),
    #[error("the assertion could not be signed: {0}")]
    Signing(String),
}

/// A bearer token and when it expires.
#[derive(Clone)]
pub(in crate::upstream) struct Token {
    pub secret: Arc<str>,
    expires_at: Instant,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl Token {
    fn usable(&self, now: Instant) -> bool {
        self.expires_at > now + USE_MARGIN
    }

    fn fresh(&self, now: Instant) -> bool {
        self.expires_at > now + RENEW_MARGIN
    }
}

/// The token requests of one upstream, for the metrics.
#[derive(Debug, Default)]
pub struct TokenCounts {
    pub issued: AtomicU64,
    pub failed: AtomicU64,
}

/// One upstream's tokens: how they are asked for, and the ones kept.
pub(in crate::upstream) struct TokenSource {
    /// The upstream's name, for the log.
    upstream: String,
    grant: Grant,
    endpoint: Endpoint,
    /// The URL as configured: a signed assertion's audience.
    audience: String,
    /// Bounds each request to the endpoint: the upstream's timeout.
    timeout: Duration,
    cache: Cache,
    pub counts: TokenCounts,
    /// Why the last request failed, until one succeeds: for `/readyz`.
    last_failure: Mutex<Option<String>>,
}

impl TokenSource {
    /// The source of `config`, its secrets read now; each request bounded by `timeout`.
    pub fn new(
        upstream: &str,
        config: &OauthConfig,
        timeout: Duration,
    ) -> Result<Arc<TokenSource>, OauthSetupError> {
        let url = config.token_url().map_err(OauthSetupError::TokenUrl)?;
        let audience = config.token_url_text().unwrap_or_default();
        Ok(Arc::new(TokenSource {
            upstream: upstream.to_string(),
            grant: Grant::of(config)?,
            endpoint: Endpoint::new(url).map_err(OauthSetupError::Tls)?,
            audience,
            timeout,
            cache: Cache::default(),
            counts: TokenCounts::default(),
            last_failure: Mutex::new(None),
        }))
    }

    /// A token for `mailbox`: the one kept while it is good (renewed in the background once
    /// it nears its end), else a new one, which the caller waits for (at most the timeout).
    pub async fn token(self: &Arc<Self>, mailbox: &str) -> Result<Token, TokenError> {
        let slot = self.cache.slot(&self.key(mailbox));
        let now = Instant::now();
        if let Some(token) = slot.current().filter(|t| t.usable(now)) {
            if !token.fresh(now) {
                self.renew_in_background(slot, mailbox);
            }
            return Ok(token);
        }
        let _fetching = slot.fetching.lock().await;
        if let Some(token) = slot.current().filter(|t| t.usable(Instant::now())) {
            return Ok(token); // another message's request brought it meanwhile
        }
        let token = self.fetch(mailbox).await?;
        slot.set(token.clone());
        Ok(token)
    }

    /// A new token in place of `refused`, which upstream would not take (revoked, or
    /// expired early); one that another message got meanwhile serves.
    pub async fn renew(
        self: &Arc<Self>,
        mailbox: &str,
        refused: &Token,
    ) -> Result<Token, TokenError> {
        let slot = self.cache.slot(&self.key(mailbox));
        let _fetching = slot.fetching.lock().await;
        if let Some(token) = slot.current() {
            if token.secret != refused.secret && token.usable(Instant::now()) {
                return Ok(token);
            }
        }
        slot.clear();
        let token = self.fetch(mailbox).await?;
        slot.set(token.clone());
        Ok(token)
    }

    /// Why the last request failed, while none has succeeded since.
    pub fn last_failure(&self) -> Option<String> {
        self.last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn key(&self, mailbox: &str) -> String {
        match self.grant.per_mailbox() {
            true => mailbox.to_ascii_lowercase(),
            false => String::new(),
        }
    }

    /// Renews `slot`'s token off the message's path, unless a request for it is under way.
    fn renew_in_background(self: &Arc<Self>, slot: Arc<cache::Slot>, mailbox: &str) {
        let Ok(fetching) = Arc::clone(&slot.fetching).try_lock_owned() else {
            return;
        };
        let (source, mailbox) = (Arc::clone(self), mailbox.to_string());
        tokio::spawn(async move {
            if let Ok(token) = source.fetch(&mailbox).await {
                slot.set(token);
            }
            drop(fetching);
        });
    }

    /// One request to the endpoint, bounded by the timeout; counted, and a failure logged
    /// (the mailbox and the endpoint's words, never a secret).
    async fn fetch(&self, mailbox: &str) -> Result<Token, TokenError> {
        let asked = async {
            let form = (self.grant.form(mailbox, &self.audience))
                .map_err(|e| TokenError::Signing(e.to_string()))?;
            match tokio::time::timeout(self.timeout, self.endpoint.ask(form)).await {
                Ok(answer) => answer,
                Err(_) => Err(TokenError::TimedOut(self.timeout)),
            }
        };
        let result = asked.await;
        let mut last_failure = self.last_failure.lock().unwrap_or_else(|e| e.into_inner());
        match &result {
            Ok(_) => {
                self.counts.issued.fetch_add(1, Ordering::Relaxed);
                *last_failure = None;
            }
            Err(e) => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                *last_failure = Some(e.to_string());
                tracing::warn!(
                    target: "mailsluice::upstream",
                    upstream = self.upstream.as_str(),
                    mailbox,
                    token_url = %self.endpoint.url,
                    error = %e,
                    "upstream.token_failed"
                );
            }
        }
        drop(last_failure);
        let issued = result?;
        let lifetime = issued
            .expires_in
            .map_or(DEFAULT_LIFETIME, Duration::from_secs);
        Ok(Token {
            secret: issued.access_token.into(),
            expires_at: Instant::now() + lifetime,
        })
    }
}

#[cfg(test)]
mod tests;
