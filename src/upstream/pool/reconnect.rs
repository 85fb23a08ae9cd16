//! When a pooled connection is retired: after a number of messages, or an age, as providers
//! behind load balancers ask (SES among them).

use std::time::{Duration, Instant};

use crate::config::SmtpClient;

/// How much a connection has served, for the reconnect bounds.
#[derive(Clone, Copy)]
pub(super) struct Age {
    pub opened: Instant,
    pub transactions: u64,
}

/// When a connection is retired between messages (upstream asks for it, e.g. SES behind its
/// load balancers); `None`: no bound.
#[derive(Clone, Copy, Default)]
pub(in crate::upstream) struct Reconnect {
    pub max_messages: Option<u64>,
    pub max_age: Option<Duration>,
}

impl Reconnect {
    /// The bounds `max_messages_per_connection` and `max_connection_age_ms` set (0: none).
    pub(in crate::upstream) fn of(client: &SmtpClient) -> Reconnect {
        let (messages, age_ms) = (
            client.max_messages_per_connection,
            client.max_connection_age_ms,
        );
        Reconnect {
            max_messages: (messages > 0).then_some(messages),
            max_age: (age_ms > 0).then(|| Duration::from_millis(age_ms)),
        }
    }

    pub(super) fn due(&self, age: &Age) -> bool {
        self.max_messages.is_some_and(|max| age.transactions >= max)
            || self.max_age.is_some_and(|max| age.opened.elapsed() >= max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(old: Duration, transactions: u64) -> Age {
        let opened = Instant::now()
            .checked_sub(old)
            .expect("the machine has been up that long");
        Age {
            opened,
            transactions,
        }
    }

    #[test]
    fn a_connection_is_retired_at_either_bound_and_never_without_one() {
        let none = Reconnect::default();
        assert!(!none.due(&age(Duration::from_secs(3600), 1_000_000)));
        let messages = Reconnect {
            max_messages: Some(3),
            max_age: None,
        };
        assert!(!messages.due(&age(Duration::from_secs(3600), 2)));
        assert!(messages.due(&age(Duration::ZERO, 3)));
        let aged = Reconnect {
            max_messages: None,
            max_age: Some(Duration::from_secs(60)),
        };
        assert!(!aged.due(&age(Duration::from_secs(30), 1_000)));
        assert!(aged.due(&age(Duration::from_secs(61), 0)));
    }
}
