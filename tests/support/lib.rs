//! The support of the integration tests and of the drivers in `examples/`: a crate of its own
//! (`mailsluice-test-support`, a dev-dependency of mailsluice). Each area's `main.rs` names it
//! `support` (`use mailsluice_test_support as support;`) and uses a part of it:
//!
//! - `relay`: the relay in-process (`Relay`, `smtp_relay`, `memory_relay`) and a raw client.
//! - `config`: a relay's config as a test writes it (`TestConfig`): the `[smtp]` head, the
//!   upstreams, then the test's own tables.
//! - `dns`: a DNS server on 127.0.0.1 answering from a zone the test writes (`TestDns`).
//! - `memory`: a forwarder that records what it is given (`MemoryForwarder`).
//! - `hidden_rate`: an SES-like upstream in memory with its own hidden bucket (`HiddenRate`).
//! - `ses_like`: an upstream answering as SES over SMTP (`250 Ok ses-<n>`), or refusing.
//! - `ses_events`: SES's bounce and complaint events as the reputation guard reads them.
//! - `ses`: a fake SESv2 HTTP endpoint with injected answers (`FakeSes`), and its SES tenants
//!   (`ses_tenants`: identities, reputation entities, suppressions); `moto`: moto's
//!   server as SES's API stand-in (`MotoServer::spawn`, a skip without it), and as S3 and
//!   SQS for the spool's `store = "s3"` (`spool_s3`: a bucket, a queue, the `[spool]` table).
//! - `aws_fault`: a proxy in front of moto that takes S3 or SQS (or one operation) down, or
//!   loses an answer after the call was made, and counts the calls per service and operation.
//! - `upstream`: the test upstream SMTP server, with injected faults, SES's hidden sending rate
//!   (`set_hidden_rate`) and connection bound (`set_max_connections`); what it got, and each
//!   message's `Message-ID` (`message_ids`).
//! - `process`: the `mailsluice` binary as a process of its own (signals, exit, memory).
//! - `redis`: a private `redis-server` (`RedisServer::start`) and a three-node cluster.
//! - `throttle`: a throttle on tokio's paused clock, spawned acquires, recorded events.
//! - `invariant`: the checker of "every `250` is upstream once, nothing else is".
//! - `campaign`, `campaign_check`: the fault campaign across relays, Redis and upstream, and
//!   its checker (retries of ambiguous attempts allowed, rate per 1 s window measured).
//! - `traffic`: a tolerant client that logs what it saw, for the invariant.
//! - `load`: thousands of connections to the binary, resident memory measured.
//! - `auth`, `tls`, `http`: AUTH users with cheap hashes, test certificates and a TLS
//!   client, a GET on the admin endpoint.
//! - `host`: free ports, scratch directories, and whether a program (swaks, postfix) is
//!   installed, and `skip`, the one place a test skips: a failure under `CI=true` and
//!   unless `MAILSLUICE_ALLOW_SKIP=1`.
//! - `proxy`: PROXY protocol headers (v1, v2) written by hand, and connecting from a chosen
//!   loopback address (`127.0.0.2`, ...).
//! - `wait`: `until`, polling a condition in real time (at most 30 s); `within`, for a
//!   bound of the test's own, telling whether it held.
//! - `clock`: tokio's paused clock held still while the test waits on real sockets.
//! - `replies`: docs/replies.md's rows, and a reply matched against a row's full text.
//! - `token_endpoint`: an OAuth 2.0 token endpoint on 127.0.0.1 for XOAUTH2 upstreams (client
//!   credentials, or a service account's JWT checked with a test key made at test time),
//!   whose tokens the test upstream's `require_xoauth2` takes.
//! - `webhook`: an HTTPS webhook receiver on 127.0.0.1 (records POSTs, answers a set status,
//!   or hangs), and the receiver's signature check of docs/webhooks.md.

pub mod auth;
pub mod aws_fault;
pub mod campaign;
pub mod campaign_check;
pub mod clock;
pub mod config;
pub mod delay;
pub mod dns;
pub mod hidden_rate;
pub mod host;
pub mod http;
pub mod invariant;
pub mod load;
pub mod memory;
pub mod moto;
pub mod process;
pub mod proxy;
pub mod redis;
pub mod relay;
pub mod replies;
pub mod ses;
pub mod ses_events;
pub mod ses_like;
pub mod ses_tenants;
pub mod spool_s3;
pub mod throttle;
pub mod tls;
pub mod token_endpoint;
pub mod traffic;
pub mod upstream;
mod upstream_session;
pub mod wait;
pub mod webhook;
