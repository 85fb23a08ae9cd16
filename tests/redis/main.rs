//! The shared store on a private `redis-server`: what only the Redis store has, several
//! relays on one Redis, and Redis failing under load.

#[path = "../support/mod.rs"]
mod support;

mod redis_faults;
mod redis_relay;
mod redis_store;
