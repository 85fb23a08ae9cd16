//! Shared test support: an in-process relay, raw and recording helpers, the test upstream.
#![allow(dead_code)]

pub mod memory;
pub mod relay;
