//! Reading the shared state without taking: a bucket's allowance, whether the store answers,
//! what an adaptive layer learned (peek, readiness, metrics).

use super::Shared;
use crate::config::OnError;
use crate::throttle::error::ThrottleError;
use crate::throttle::peek::Peek;

/// The shared store did not answer a read of its own: the relay is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the shared store (Redis) does not answer")]
pub struct StoreUnreachable;

impl Shared {
    /// The shared state of one bucket (the fallback's under `on_error = "local"` or `"allow"`
    /// while the store cannot answer).
    pub(crate) async fn peek(&self, layer: usize, key: &str) -> Result<Peek, ThrottleError> {
        if let Some(p) = self.try_store(self.store.peek(layer, key)).await {
            return Ok(p);
        }
        match self.on_error {
            OnError::Reject => Err(ThrottleError::StoreUnavailable),
            _ => Ok(self.peek_fallback(layer, key)),
        }
    }

    /// Whether the store itself answers now (no fallback), for readiness.
    pub(crate) async fn reachable(&self, layer: usize) -> Result<(), StoreUnreachable> {
        match self.try_store(self.store.peek(layer, "")).await {
            Some(_) => Ok(()),
            None => Err(StoreUnreachable),
        }
    }

    /// The limit in force of an adaptive shared layer, as the store last said.
    pub(crate) fn learned_limit(&self, layer: usize) -> Option<u64> {
        self.store.learned_limit(layer)
    }

    /// This replica's in-process view of a shared bucket (what `on_error = "local"` uses).
    pub(crate) fn peek_fallback(&self, layer: usize, key: &str) -> Peek {
        self.fallback.peek_now(layer, key).unwrap_or(Peek {
            limit: 0,
            remaining: 0,
            reset: 0,
            waiting: 0,
            effective_limit: None,
        })
    }
}
