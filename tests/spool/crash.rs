//! The binary as a process of its own: SIGKILL while messages are held and being released,
//! a full filesystem, a second process on the same spool.
