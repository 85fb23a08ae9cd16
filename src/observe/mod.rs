//! What the relay records about itself, for operators; the sessions write it, the admin
//! endpoint and the logs show it.
//!
//! - `activity`: what the sessions are doing now, counted per activity.
//! - `cause`: an error's cause in a few words (never an SDK's debug dump).
//! - `labels`: the label sets of the relay's own metric families.
//! - `metrics`: the Prometheus registry and what is counted; `spool_metrics` the spool's,
//!   `spool_store_metrics` the s3 store's calls, `ses_metrics` SES tenants', `token_metrics`
//!   the XOAUTH2 upstreams' token requests, `upstream_states` each upstream's state (paused,
//!   reachable, failing).
//! - `recent`: the last refusals, and refusals per layer in the last minute (status page).
//! - `log_format`: the human log format's fields, client-supplied values quoted and escaped.
//! - `traces`: OpenTelemetry spans of the messages, exported over OTLP (`[telemetry]`).
//! - `webhooks`: the webhooks' metrics, per webhook.

pub mod activity;
pub mod cause;
pub mod labels;
pub mod log_format;
pub mod metrics;
pub mod recent;
pub mod ses_metrics;
pub mod spool_metrics;
pub mod spool_store_metrics;
pub mod token_metrics;
pub mod traces;
pub mod upstream_states;
pub mod webhooks;
