//! The throttle a configuration describes: its layers, and the Redis store of the layers with
//! `store = "redis"`. Apart from `layers` so that the engine itself knows nothing of TOML.

use std::sync::Arc;

use super::store::redis::RedisStore;
use super::{Clock, LayerSpec, SharedLayers, Throttle};
use crate::config::{Config, StoreKind};

/// Every `[[throttle]]` layer, in file order; redis layers share the `[redis]` store.
/// `Config::validate` has checked what could fail here; should the store still not build, the
/// error is logged and the layers run in process (as `on_error = "local"` would).
pub fn from_config(config: &Config, clock: Arc<dyn Clock>) -> Throttle {
    let specs: Vec<LayerSpec> = config.throttle.iter().map(|l| l.spec()).collect();
    let layers: Vec<usize> = (config.throttle.iter().enumerate())
        .filter(|(_, l)| l.store == StoreKind::Redis)
        .map(|(i, _)| i)
        .collect();
    let Some(redis) = config.redis.as_ref().filter(|_| !layers.is_empty()) else {
        return Throttle::new(specs, clock);
    };
    match RedisStore::new(&redis.options(), &specs) {
        Ok(store) => {
            let shared = SharedLayers {
                store: Arc::new(store),
                layers,
                on_error: redis.on_error(),
            };
            Throttle::with_shared(specs, clock, shared)
        }
        Err(e) => {
            tracing::error!(error = %e, "redis store unusable; redis layers run in process");
            Throttle::new(specs, clock)
        }
    }
}
