//! Throttling: the throttle alone on tokio's paused clock (one layer, several layers,
//! properties), the store contract over both stores, and throttling in the SMTP dialogue.

use mailsluice_test_support as support;

mod throttle_drain;
mod throttle_fair;
mod throttle_fair_props;
mod throttle_fair_shared;
mod throttle_layers;
mod throttle_props;
mod throttle_seed;
mod throttle_store;
mod throttling;
mod throttling_fair;
mod throttling_tcp;
