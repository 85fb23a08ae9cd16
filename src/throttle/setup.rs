//! The throttle a configuration describes: each `[[throttle]]` layer turned into the
//! engine's [`LayerSpec`], and the Redis store of the layers with `store = "redis"`. Apart
//! from the engine so that the engine itself knows nothing of TOML.

use std::sync::Arc;
use std::time::Duration;

use super::shared_layers::SharedLayers;
use super::spec::LayerSpec;
use super::stack::Throttle;
use super::store::redis::RedisStore;
use crate::clock::Clock;
use crate::config::{Config, StoreKind, ThrottleConfig};
use crate::redis::redis_options;

/// Every `[[throttle]]` layer, in file order; redis layers share the `[redis]` store.
/// `Config::validate` has checked what could fail here; should the store still not build, the
/// error is logged and the layers run in process (as `on_error = "local"` would).
pub fn from_config(config: &Config, clock: Arc<dyn Clock>) -> Throttle {
    let specs: Vec<LayerSpec> = config.throttle.iter().map(spec).collect();
    let layers: Vec<usize> = (config.throttle.iter().enumerate())
        .filter(|(_, l)| l.store == StoreKind::Redis)
        .map(|(i, _)| i)
        .collect();
    let Some(redis) = config.redis.as_ref().filter(|_| !layers.is_empty()) else {
        return Throttle::new(specs, clock);
    };
    match RedisStore::new(&redis_options(redis), &specs) {
        Ok(store) => {
            let shared = SharedLayers {
                store: Arc::new(store),
                layers,
                on_error: redis.on_error,
            };
            Throttle::with_shared(specs, clock, shared)
        }
        Err(e) => {
            tracing::error!(error = %e, "redis store unusable; redis layers run in process");
            Throttle::new(specs, clock)
        }
    }
}

/// The layer as the throttle engine sees it.
pub fn spec(layer: &ThrottleConfig) -> LayerSpec {
    LayerSpec {
        name: layer.name().to_string(),
        limit: layer.limit.get(),
        interval: Duration::from_millis(layer.interval_ms.get()),
        burst: layer.burst(),
        mode: *layer.mode.get_ref(),
        max_wait: Duration::from_millis(layer.max_wait_ms),
        max_queue: layer.max_queue.get(),
        max_keys: layer.max_keys.get(),
        refill: layer.refill,
        idle_ttl: Duration::from_millis(layer.idle_ttl_ms.get()),
        charge_failures: layer.charge_failures,
        adaptive: layer.adaptive_floor(),
        adapt: layer.adapt,
        fair: layer.fair_by.is_some(),
        weights: (layer.weights.iter())
            .map(|(k, w)| (k.clone(), w.get()))
            .collect(),
        rcpt_domain: layer.key == crate::config::KeySource::RcptDomain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fair_by_and_weights_reach_the_spec() {
        let text = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://o\"\n\
                    [[throttle]]\nname = \"a\"\nkey = \"none\"\nlimit = 5\n\
                    fair_by = \"auth\"\nweights = { acme = 3 }\n\
                    [[throttle]]\nname = \"b\"\nkey = \"auth\"\nlimit = 5\n";
        let config = Config::parse(text).unwrap();
        let (a, b) = (spec(&config.throttle[0]), spec(&config.throttle[1]));
        assert!(a.fair && !b.fair);
        assert_eq!((a.weight("acme"), a.weight("other")), (3, 1));
    }
}
