//! The throttle engine (being written).
pub mod bucket;
pub mod clock;
