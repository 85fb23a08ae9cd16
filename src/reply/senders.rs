//! Who may send as whom, at MAIL and at the final dot alike: an AUTH user's `senders` (its
//! MAIL FROM), an upstream tenant's sending identities.

use super::Reply;
use crate::upstream::IdentityRefusal;

/// MAIL FROM outside the user's `senders`.
pub fn sender_not_allowed(address: &str, user: &str) -> Reply {
    Reply::new(
        553,
        "5.7.1",
        format!("<{address}>: sender not allowed for user {user}"),
    )
}

/// The sender is no sending identity of the upstream's tenant (SES would refuse the message
/// after its whole body), or upstream does not know the tenant (it must be created first).
pub fn identity_refused(refusal: &IdentityRefusal) -> Reply {
    let (code, enhanced) = refusal.code();
    Reply::new(code, enhanced, refusal.to_string())
}
