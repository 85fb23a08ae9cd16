//! The probes of failing upstreams from the spool: while an upstream's breaker is open, one
//! message waiting for it is made due per `breaker_probe_ms`, so that its return is noticed
//! even when nothing new arrives, and the others wait without trying it.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::spool::Spool;
use crate::state::context::Context;

/// When each failing upstream last had a message made due to probe it.
#[derive(Default)]
pub struct Probes {
    nudged: HashMap<String, Instant>,
}

impl Probes {
    /// Makes one message due for each failing upstream whose probe may go; when to look again.
    pub fn nudge(&mut self, ctx: &Context, spool: &Spool) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        for upstream in ctx.setup.upstreams.iter() {
            let name = upstream.name();
            let interval = Duration::from_millis(upstream.config.breaker_probe_ms.get());
            let Some(left) = upstream.breaker.next_probe(interval) else {
                self.nudged.remove(name);
                continue;
            };
            // Once per interval at most: the message made due claims the probe only when
            // its attempt starts.
            let since = self.nudged.get(name).map(|at| now - *at);
            let mut wait = match since {
                Some(since) if since < interval => left.max(interval - since),
                _ => left,
            };
            if wait.is_zero() {
                spool.upstream_back(name, Some(1));
                self.nudged.insert(name.to_string(), now);
                wait = interval;
            }
            next = Some(next.map_or(now + wait, |n| n.min(now + wait)));
        }
        next
    }
}
