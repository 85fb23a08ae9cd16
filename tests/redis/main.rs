//! The shared store on a private `redis-server`: what only the Redis store has, several
//! relays on one Redis, Redis failing under load, and shutdown with a Redis reservation.

use mailsluice_test_support as support;

mod redis_campaign;
mod redis_faults;
mod redis_feedback;
mod redis_relay;
mod redis_reputation;
mod redis_sentinel;
mod redis_shutdown;
mod redis_store;
