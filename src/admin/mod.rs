//! The admin HTTP endpoint (`[admin] listen`): what an operator reads from the running relay.
//! It reads the live context and what `observe` recorded; it changes nothing.
//!
//! - `endpoint`: the routes: `/`, `/healthz`, `/readyz`, `/metrics`, `/buckets/{layer}/{key}`.
//! - `status_page`: the HTML of `/`.

pub mod endpoint;
pub mod status_page;
