//! Shared test support: an in-process relay, a raw client, a recording forwarder, and the
//! test upstream SMTP server. Each test binary uses a different part of them.
#![allow(dead_code)]

pub mod auth;
pub mod http;
pub mod invariant;
pub mod load;
pub mod memory;
pub mod process;
pub mod redis;
pub mod relay;
pub mod tls;
pub mod traffic;
pub mod upstream;
mod upstream_session;
