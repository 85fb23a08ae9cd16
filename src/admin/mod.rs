//! The admin HTTP endpoint (`[admin] listen`): what an operator reads from the running relay.
//! It reads the live context and what `observe` recorded; it changes only the reputation
//! guard's state (a tenant resumed, a suppression lifted) and the spool's (a message tried now
//! or removed, a key stopped), and only behind `guard`.
//!
//! - `endpoint`: the routes: `/`, `/healthz`, `/readyz`, `/metrics`, `/buckets/{layer}/{key}`.
//! - `listener`: the accept loop, bounded: connections, the time a request may take to arrive.
//! - `host`: the `Host` it answers (its listen address, `[admin] hosts`), 421 for any other.
//! - `browser`: changes refused from another site's page (403) or with a form body (415).
//! - `guard`: HTTP Basic authentication with `[admin] password_hash` (its own check slots and
//!   lockout); 403 for changes without it.
//! - `reputation`: `/reputation`, `/reputation/{key}/resume`, `/suppressions/{address}`.
//! - `spool`: `/spool`, `/spool/{id}` (read, `release`, delete), `/spool/keys/{layer}/{key}`.
//! - `sns`: `POST /ses/events`, SES's events from SNS, each message's signature checked.
//! - `status_page`: the HTML of `/`.

pub mod browser;
pub mod endpoint;
pub mod guard;
pub mod host;
pub mod listener;
pub mod reputation;
pub mod sns;
pub mod spool;
pub mod status_page;
