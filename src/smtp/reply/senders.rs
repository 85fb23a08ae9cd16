//! Who may send as whom: an AUTH user's `senders`.

use super::Reply;

/// MAIL FROM outside the user's `senders`.
pub fn sender_not_allowed(address: &str, user: &str) -> Reply {
    Reply::new(
        553,
        "5.7.1",
        format!("<{address}>: sender not allowed for user {user}"),
    )
}

/// A `From:` address outside the user's `senders`, at the final dot: nothing was forwarded.
pub fn from_not_allowed(address: &str, user: &str) -> Reply {
    Reply::new(
        550,
        "5.7.1",
        format!("From: <{address}> not allowed for user {user}"),
    )
}
