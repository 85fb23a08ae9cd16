//! Which pool a message goes through: the upstream's one, or with `username = "{sender}"`
//! (XOAUTH2) the pool of the envelope sender's mailbox, since each connection is logged in
//! as one mailbox. A sender outside `mailboxes` is refused here, before any token is asked
//! for. The pools are bounded: past [`MAX_POOLS`] mailboxes, the least recently used pool
//! that no message holds is closed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::config::mailbox_allowed;
use crate::message::Envelope;
use crate::upstream::oauth::TokenSource;
use crate::upstream::pool::{Connector, Login, Pool, Reconnect};
use crate::upstream::reply::rejected;
use crate::upstream::UpstreamError;

/// The most mailboxes with a pool of their own at once.
pub(super) const MAX_POOLS: usize = 64;

pub(super) enum Pools {
    One(Arc<Pool>),
    /// One pool per envelope sender's mailbox.
    PerSender(Box<PerSender>),
}

pub(super) struct PerSender {
    /// `mailboxes`: the addresses and `@domains` a sender may log in as.
    allowed: Vec<String>,
    /// A pool's connector, its login set per mailbox.
    connector: Connector,
    tokens: Arc<TokenSource>,
    size: usize,
    timeout: std::time::Duration,
    reconnect: Reconnect,
    pools: Mutex<HashMap<String, (Arc<Pool>, Instant)>>,
}

impl Pools {
    /// The pool `envelope`'s message goes through.
    pub fn for_message(&self, envelope: &Envelope) -> Result<Arc<Pool>, UpstreamError> {
        match self {
            Pools::One(pool) => Ok(Arc::clone(pool)),
            Pools::PerSender(per_sender) => per_sender.pool(envelope.from.as_deref()),
        }
    }

    /// The single pool, when there is one (for the probe and the metrics).
    pub fn one(&self) -> Option<&Arc<Pool>> {
        match self {
            Pools::One(pool) => Some(pool),
            Pools::PerSender(_) => None,
        }
    }
}

impl PerSender {
    pub fn new(
        allowed: Vec<String>,
        connector: Connector,
        tokens: Arc<TokenSource>,
        (size, timeout, reconnect): (usize, std::time::Duration, Reconnect),
    ) -> PerSender {
        PerSender {
            allowed,
            connector,
            tokens,
            size,
            timeout,
            reconnect,
            pools: Mutex::new(HashMap::new()),
        }
    }

    fn pool(&self, sender: Option<&str>) -> Result<Arc<Pool>, UpstreamError> {
        let allowed = sender.filter(|s| mailbox_allowed(&self.allowed, s));
        let Some(sender) = allowed else {
            let who = sender.map_or("the null sender".to_string(), |s| format!("<{s}>"));
            return Err(rejected(
                550,
                "5.7.1",
                format!("{who} is not a mailbox this relay may send as"),
            ));
        };
        let mailbox = sender.to_ascii_lowercase();
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((pool, used)) = pools.get_mut(&mailbox) {
            *used = Instant::now();
            return Ok(Arc::clone(pool));
        }
        if pools.len() >= MAX_POOLS {
            let idle = (pools.iter())
                .filter(|(_, (pool, _))| Arc::strong_count(pool) == 1)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(mailbox, _)| mailbox.clone());
            if let Some(idle) = idle {
                pools.remove(&idle);
            }
        }
        let connector = Connector {
            login: Login::Xoauth2 {
                mailbox: mailbox.clone(),
                tokens: Arc::clone(&self.tokens),
            },
            ..self.connector.clone()
        };
        let pool = Pool::new(connector, self.size, self.timeout).with_reconnect(self.reconnect);
        let pool = Arc::new(pool);
        pools.insert(mailbox, (Arc::clone(&pool), Instant::now()));
        Ok(pool)
    }
}
