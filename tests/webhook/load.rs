//! A webhook's URL to an internal address, or over plain http, is refused at load with its key
//! and line, unless `allow_networks` lists the address.

use mailsluice::config::Config;

use crate::support::config::TestConfig;
use crate::{REPUTATION, SECRET, SECRET_ENV};

fn load(url: &str, extra: &str) -> Result<Config, String> {
    std::env::set_var(SECRET_ENV, SECRET);
    // The minimal head: the test names the line of the webhook's `url`.
    let text = TestConfig::minimal()
        .upstream("file://out")
        .then(REPUTATION)
        .then(&format!(
            "[[webhook]]\ntenant = \"*\"\nurl = \"{url}\"\nsecret_env = \"{SECRET_ENV}\"\n{extra}"
        ))
        .text();
    Config::parse(&text).map_err(|e| e.to_string())
}

#[test]
fn a_url_to_an_internal_address_is_refused_at_load() {
    for url in [
        "https://127.0.0.1:8443/hook",
        "https://169.254.169.254/latest/meta-data",
        "https://192.168.0.10/hook",
        "https://[fd00::1]/hook",
        "https://localhost/hook",
    ] {
        let err = load(url, "").unwrap_err();
        assert!(err.contains("key `webhook.url`"), "{url}: {err}");
        assert!(
            err.contains("internal address") && err.contains("line 13"),
            "{url}: {err}"
        );
    }
    let err = load("http://hooks.example.com/", "").unwrap_err();
    assert!(
        err.contains("webhook.url") && err.contains("plain http"),
        "{err}"
    );
    load(
        "https://127.0.0.1:8443/hook",
        "allow_networks = [\"127.0.0.0/8\"]",
    )
    .unwrap();
    load("https://hooks.example.com/hook", "").unwrap();
}
