//! The reputation guard's reply at RCPT: a suppressed recipient (a paused tenant's is the
//! admission step's, `pipeline/admission/reputation.rs`).

use super::Reply;
use crate::reputation::Suppression;

/// A recipient that hard-bounced or complained, refused for every tenant.
pub fn suppressed(address: &str, suppression: &Suppression) -> Reply {
    Reply::new(
        550,
        "5.1.1",
        format!(
            "<{address}> suppressed: {} on {}",
            suppression.reason_text(),
            suppression.date
        ),
    )
}
