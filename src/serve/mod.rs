//! Wiring: what starts and runs the relay, on top of every other part.
//!
//! - `server`: the accept loop, the connection bounds, graceful shutdown: `run`.
//! - `account`: layers at an SES account's own rate (`limit = "account"`), its day's quota.
//! - `events`: SES's events from an SQS queue, for the reputation guard.
//! - `reload`: SIGHUP: a new context from a new config, unchanged layers kept.
//! - `startup`: what starting reads and checks before the network (`serve` and `check`).
//! - `commands`: the subcommands `check`, `peek` and `hash-password`.

pub mod account;
pub mod commands;
pub mod events;
pub mod reload;
pub mod server;
pub mod startup;
