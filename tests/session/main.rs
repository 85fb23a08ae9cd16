//! The SMTP session: the dialogue, the envelope as relayed, hostile input, random byte streams, AUTH, TLS, and real
//! clients (swaks, Python's smtplib) in front of the relay.

#[path = "../support/mod.rs"]
mod support;

mod auth;
mod envelope;
mod external_client;
mod hostile;
mod session;
mod session_props;
mod tls;
