//! What the tasks of a running relay share: below the sessions and the admin endpoint, which
//! read it, and above the parts it holds.
//!
//! - `context`: `Setup` (what a reload replaces), `Services` (what outlives it), `Context`
//!   (what a session reads), `Live` (the context in force).
//! - `deps`: `Deps`, what `run` needs from outside (made by `main` or a test).
//! - `health`: whether the SMTP listeners accept, for readiness.
//! - `kept`: what the pipeline's admission steps keep between messages, one value per type.
//! - `shutdown`: the one shutdown signal every task listens to.
//! - `grace_over`: the end of the shutdown's grace, as each session hears it.

pub mod context;
pub mod deps;
pub mod grace_over;
pub mod health;
pub mod kept;
pub mod shutdown;
