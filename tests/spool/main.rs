//! Hold mode and the spool through SMTP: a burst held and released at the layer's rate, in
//! order; no head-of-line blocking and several of a key with upstream at once; the bounds
//! (`max_held`, a key's share of the spool, the spool's storage); what release does with a
//! refusal (a report to the sender), a paused tenant and a damaged file; the operators'
//! endpoints and `mailsluice spool` (the binary against a relay in this process); what is
//! counted and logged of held and released messages; hostile input against the reports and
//! the spool's directories; every temporary failure of upstream held,
//! and a failing upstream's breaker; and, with the binary as a process of its own, a crash
//! and a full filesystem. The spool on S3 and SQS against moto's server (`s3_store`), and
//! relay processes on it (`s3_relays/`): two replicas, one killed while releasing, S3 or
//! SQS down, one tenant's burst ahead of another's.

use mailsluice_test_support as support;

mod admin;
mod browser;
mod cli;
mod common;
mod counted;
mod crash;
mod head_of_line;
mod hold;
mod hostile;
mod release;
mod s3_relays;
mod s3_store;
mod share;
mod upstream_fails;
