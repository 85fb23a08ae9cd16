//! The SMTP session: the dialogue, the envelope as relayed, hostile input and its bounds
//! (AUTH checks, junk commands, buffered DATA), random byte streams, AUTH, TLS, and real
//! clients (swaks, Python's smtplib) in front of the relay; the PROXY protocol behind a balancer.

use mailsluice_test_support as support;

mod auth;
mod auth_bounds;
mod command_bounds;
mod envelope;
mod external_client;
mod hostile;
mod outcomes;
mod proxy;
mod replies;
mod reputation;
mod senders;
mod session;
mod session_props;
mod tls;
