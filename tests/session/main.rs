//! The SMTP session: the dialogue, hostile input, random byte streams, AUTH, TLS, and real
//! clients (swaks, Python's smtplib) in front of the relay.

#[path = "../support/mod.rs"]
mod support;

mod auth;
mod auth_bounds;
mod command_bounds;
mod external_client;
mod hostile;
mod session;
mod session_props;
mod tls;
