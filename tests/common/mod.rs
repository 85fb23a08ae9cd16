//! Helpers shared by the integration tests. Each test binary uses a different part of them.
#![allow(dead_code)]

pub mod upstream;
mod upstream_session;
