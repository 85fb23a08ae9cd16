//! The upstream's pause after a quota reply (SES `454 ... Daily message quota exceeded`).
//!
//! Why a pause and not per-message retries: once the quota is spent, every message would only
//! meet the same refusal, so the relay stops sending for `quota_pause_ms`: waiting and new
//! messages get `451 4.7.1 Upstream sending quota exhausted` at once, with the time left as
//! the hint. When the pause is over, one message goes as a probe while the others wait for
//! its verdict: a probe refused with a quota reply pauses again; any other answer ends the
//! pause. On tokio's clock, so tests drive it with paused time.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Paused {
        until: Instant,
    },
    /// The pause is over and one message is testing upstream.
    Probing,
}

/// Whether upstream is paused; shared by every session (and kept across reloads).
pub struct Pause {
    state: watch::Sender<State>,
}

/// What a message may do now.
pub enum Admission {
    /// Upstream takes messages.
    Open,
    /// This message is the probe: report its verdict through the guard.
    Probe(Probe),
    /// Paused: refuse with this hint.
    Paused(Duration),
}

/// The probe in flight; dropped without a verdict (the client left), the next one probes.
pub struct Probe {
    pause: Arc<Pause>,
    done: bool,
}

impl Probe {
    /// Upstream answered the probe without a quota reply (a quota reply calls
    /// [`Pause::pause`] instead): the pause is over.
    pub fn open(mut self) {
        self.done = true;
        self.pause.replace_probing(State::Open);
    }
}

impl Drop for Probe {
    /// No verdict (the client left, or a quota reply paused again): the next message probes,
    /// unless a new pause began.
    fn drop(&mut self) {
        if !self.done {
            let until = Instant::now();
            self.pause.replace_probing(State::Paused { until });
        }
    }
}

impl Default for Pause {
    fn default() -> Pause {
        Pause {
            state: watch::Sender::new(State::Open),
        }
    }
}

impl Pause {
    /// A quota reply: nothing goes for `pause`, and every waiter is told at once.
    pub fn pause(&self, pause: Duration) {
        let until = Instant::now() + pause;
        self.state.send_replace(State::Paused { until });
        tracing::warn!(
            target: "mailsluice::upstream",
            pause_ms = pause.as_millis() as u64,
            "upstream.paused"
        );
    }

    fn replace_probing(&self, to: State) {
        self.state.send_if_modified(|s| {
            let probing = *s == State::Probing;
            if probing {
                *s = to;
            }
            probing
        });
    }

    /// The time left of a pause in force (not counting a probe out).
    pub fn left(&self) -> Option<Duration> {
        match *self.state.borrow() {
            State::Paused { until } => until.checked_duration_since(Instant::now()),
            _ => None,
        }
        .filter(|d| !d.is_zero())
    }

    /// Paused now (the pause not over, or a probe out), for `/readyz` and the metrics.
    pub fn is_paused(&self) -> bool {
        match *self.state.borrow() {
            State::Open => false,
            State::Paused { until } => Instant::now() < until,
            State::Probing => true,
        }
    }

    /// May a message go now? Waits only while a probe is out.
    pub async fn admit(self: &Arc<Pause>) -> Admission {
        let mut seen = self.state.subscribe();
        loop {
            let state = *seen.borrow_and_update();
            match state {
                State::Open => return Admission::Open,
                State::Paused { until } if Instant::now() < until => {
                    return Admission::Paused(until - Instant::now());
                }
                State::Paused { .. } => {
                    let claimed = self.state.send_if_modified(|s| match *s == state {
                        true => {
                            *s = State::Probing;
                            true
                        }
                        false => false,
                    });
                    if claimed {
                        return Admission::Probe(Probe {
                            pause: self.clone(),
                            done: false,
                        });
                    }
                }
                State::Probing => {
                    if seen.changed().await.is_err() {
                        return Admission::Open;
                    }
                }
            }
        }
    }

    /// Completes when upstream becomes paused (for messages waiting for tokens meanwhile);
    /// the time left of the pause.
    pub async fn paused(&self) -> Duration {
        let mut seen = self.state.subscribe();
        loop {
            if let State::Paused { until } = *seen.borrow_and_update() {
                let now = Instant::now();
                if now < until {
                    return until - now;
                }
            }
            if seen.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}
