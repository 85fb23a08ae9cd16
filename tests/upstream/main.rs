//! Upstream: the forwarders against the test upstream (SMTP) and a scratch directory
//! (file), over real TCP on 127.0.0.1, and the relay's answers to upstream faults. The
//! helpers below are shared by the forwarder tests.

use mailsluice_test_support as support;

mod desync;
mod envelope;
mod faults;
mod feedback;
mod file;
mod mx;
mod pipelining;
mod poison;
mod relay_faults;
mod routes;
mod ses;
mod ses_first_message;
mod ses_sync;
mod ses_tenants;
mod smtp;
mod sqs_events;
mod xoauth2;

use mailsluice::config::{Config, UpstreamConfig};
use mailsluice::message::Envelope;
use mailsluice::upstream::SmtpForwarder;

use support::config::TestConfig;

/// An `[upstream]` section as a user would write it, plus `extra` TOML lines, on a relay
/// called `relay.test`.
pub fn upstream_config(url: &str, extra: &str) -> UpstreamConfig {
    let text = TestConfig::new().upstream(url).then(extra).text();
    Config::parse(&text)
        .expect("test config")
        .upstreams
        .remove(0)
}

/// An SMTP forwarder to `url` with a short timeout, so that stalls fail fast.
pub fn smtp_forwarder(url: &str, extra: &str) -> SmtpForwarder {
    let tls = if extra.contains("tls =") {
        ""
    } else {
        "tls = \"none\"\n"
    };
    let timeout = if extra.contains("timeout_ms") {
        ""
    } else {
        "timeout_ms = 500\n"
    };
    let cfg = upstream_config(url, &format!("{timeout}{tls}{extra}"));
    SmtpForwarder::new(&cfg).expect("forwarder")
}

pub fn envelope(from: Option<&str>, rcpts: &[&str]) -> Envelope {
    Envelope {
        from: from.map(str::to_string),
        rcpts: rcpts.iter().map(|r| r.to_string()).collect(),
        smtputf8: false,
        body_8bit: false,
    }
}

pub const SIMPLE: &[u8] = b"Subject: hello\r\n\r\nHello.\r\n";
