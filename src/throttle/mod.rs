//! The throttle engine (to be written).
