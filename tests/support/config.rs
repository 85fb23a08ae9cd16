//! A relay's config file as a test writes it: the `[smtp]` head every test needs (listening on
//! 127.0.0.1 port 0, called `relay.test`, loopback trusted by default), then what the test
//! varies. Tests write the tables that are theirs alone (layers, routes, `[redis]`, ...) as
//! TOML text, so that the config reads as the file a user would write.

/// The name the relay gives itself in tests (EHLO, `Received:`, reports).
pub const HOSTNAME: &str = "relay.test";

/// A config's text, built a part at a time: `[smtp]` with its keys, then the rest in the order
/// it was added.
#[derive(Debug, Clone)]
pub struct TestConfig {
    /// `[smtp]` with its keys and subtables (`[smtp.tls]`, ...).
    smtp: String,
    /// Upstreams and the other tables, in order.
    rest: String,
}

impl TestConfig {
    /// `[smtp]` listening on 127.0.0.1 port 0, called [`HOSTNAME`].
    pub fn new() -> TestConfig {
        TestConfig {
            smtp: format!("[smtp]\nlisten = [\"127.0.0.1:0\"]\nhostname = \"{HOSTNAME}\"\n"),
            rest: String::new(),
        }
    }

    /// `[smtp]` with `listen` alone: the shortest file a user writes, for tests that name the
    /// lines of what they add, or write a `hostname` of their own.
    pub fn minimal() -> TestConfig {
        TestConfig {
            smtp: "[smtp]\nlisten = [\"127.0.0.1:0\"]\n".into(),
            rest: String::new(),
        }
    }

    /// Keys of `[smtp]` (`max_connections = 10`, ...), or its subtables (`[smtp.tls]`).
    pub fn smtp(mut self, toml: &str) -> TestConfig {
        push_lines(&mut self.smtp, toml);
        self
    }

    /// The one `[upstream]`, forwarding to `url`; its other keys may follow with
    /// [`TestConfig::then`].
    pub fn upstream(self, url: &str) -> TestConfig {
        self.then(&format!("[upstream]\nurl = \"{url}\""))
    }

    /// An `[[upstream]]` called `name`, forwarding to `url`.
    pub fn named_upstream(self, name: &str, url: &str) -> TestConfig {
        self.then(&format!("[[upstream]]\nname = \"{name}\"\nurl = \"{url}\""))
    }

    /// TOML added as written after what is there: keys of the table above it, or tables.
    pub fn then(mut self, toml: &str) -> TestConfig {
        push_lines(&mut self.rest, toml);
        self
    }

    /// The file's text.
    pub fn text(&self) -> String {
        format!("{}{}", self.smtp, self.rest)
    }
}

impl Default for TestConfig {
    fn default() -> TestConfig {
        TestConfig::new()
    }
}

/// Appends `toml`, ending it with a newline so that what comes next starts a line.
fn push_lines(text: &mut String, toml: &str) {
    text.push_str(toml);
    if !toml.is_empty() && !toml.ends_with('\n') {
        text.push('\n');
    }
}
