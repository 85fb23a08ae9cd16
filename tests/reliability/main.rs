//! Reliability (docs/reliability.md): the fault matrix, thousands of connections, and a
//! real Postfix in front, each checked with the invariant of `support/invariant.rs`.

use mailsluice_test_support as support;

mod faults;
mod load;
mod postfix;
