//! Tenant event webhooks against a local HTTPS receiver with a test certificate: each event
//! of one message's life, signed as docs/webhooks.md says and checked as a receiver would
//! (the page's own Python check too), replays refused, a receiver that is down costing the
//! mail nothing (its queue's bound reached and counted), retries on 5xx and none on 4xx, and
//! URLs to internal addresses refused at load; `[tenant]` alone enough for webhooks.

use mailsluice_test_support as support;

mod delivery;
mod hold;
mod life;
mod load;
mod signature;
mod tenant;

use support::relay::{config_text, Relay};
use support::ses_like::SesLike;

/// The reputation guard keyed by `X-Tenant`, quick to pause (one bounce of one message) and to
/// forget (a one-minute window).
pub const REPUTATION: &str = "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\n\
                              min_bounces = 1\nmin_complaints = 1\nwindow_ms = 60000\n";

/// The secret every test's webhook signs with, in its own variable.
pub const SECRET: &str = "whsec_mailsluice_tests";
pub const SECRET_ENV: &str = "MAILSLUICE_TEST_WEBHOOK_SECRET";

/// A relay with the guard and `webhooks` (`[[webhook]]` tables), forwarding to an SES-like
/// upstream.
pub async fn relay(webhooks: &str) -> Relay {
    std::env::set_var(SECRET_ENV, SECRET);
    let config = config_text("file://unused", "", &format!("{REPUTATION}{webhooks}"));
    Relay::start(&config, SesLike::new()).await
}

/// A message of `tenant` (by its header, trusted from 127.0.0.1).
pub fn message(tenant: &str) -> Vec<u8> {
    format!("X-Tenant: {tenant}\r\nSubject: hi\r\n\r\nbody\r\n").into_bytes()
}
