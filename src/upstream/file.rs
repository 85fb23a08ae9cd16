//! `file://DIR` upstream (to be written).
