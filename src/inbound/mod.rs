//! Inbound security: what guards the SMTP listener (and the admin endpoint's logins) against
//! their clients.
//!
//! - `tls`: PEM loading, the rustls acceptor, its reload.
//! - `password`: argon2id hashes for `[smtp.auth] users`, and the verifier that bounds checks
//!   in flight (memory).
//! - `auth_lockout`: failed AUTH attempts per client address, and the lockout.
//! - `login`: one password login (SMTP AUTH's, the admin endpoint's): lockout, check, delay.
//! - `connection_limit`: connections held per client address.
//! - `proxy`: the PROXY protocol header a balancer in `proxy_from` opens its connections with.

pub mod auth_lockout;
pub mod connection_limit;
pub mod login;
pub mod password;
pub mod proxy;
pub mod tls;
