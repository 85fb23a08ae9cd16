//! Wiring: what starts and runs the relay, on top of every other part.
//!
//! - `server`: the accept loop, the connection bounds, graceful shutdown: `run`.
//! - `account`: layers at an SES account's own rate (`limit = "account"`), its day's quota.
//! - `events`: SES's events from an SQS queue, for the reputation guard.
//! - `ses_sync`: the reputation guard and SES's own view of each SES tenant kept in step.
//! - `reload`: SIGHUP: a new context from a new config, unchanged layers kept.
//! - `commands`: the subcommands `check`, `peek` and `hash-password`.
//! - `spool_command`: the subcommand `spool`, a running relay's spool through its admin
//!   endpoint.

pub mod account;
pub mod commands;
pub mod events;
pub mod reload;
pub mod server;
pub mod ses_sync;
pub mod spool_command;
pub mod startup;
