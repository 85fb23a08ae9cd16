//! Hold mode and the spool through SMTP: a burst held and released at the layer's rate, in
//! order; the bounds (`max_held`, the spool's storage); what release does with a refusal (a
//! report to the sender), a paused tenant and a damaged file; hostile input against the
//! reports and the spool's directories; and, with the binary as a process of its own, a crash
//! and a full filesystem.

use mailsluice_test_support as support;

mod admin;
mod browser;
mod common;
mod crash;
mod hold;
mod hostile;
mod release;
