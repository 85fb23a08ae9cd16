//! What the client sessions are doing now, counted per activity: reading a command, reading
//! a message, waiting for tokens, forwarding. Shown as `mailsluice_sessions{activity}`, and
//! said by the shutdown of the sessions still in flight when its grace ends, so a slow stop
//! tells where it is held.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// One session's activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activity {
    /// Between commands: waiting for the client's next one (or answering it).
    Command,
    /// Reading a message's content (DATA or BDAT).
    Data,
    /// After the final dot, until its tokens come.
    Waiting,
    /// The message is with upstream.
    Upstream,
}

impl Activity {
    pub const ALL: [Activity; 4] = [
        Activity::Command,
        Activity::Data,
        Activity::Waiting,
        Activity::Upstream,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Activity::Command => "command",
            Activity::Data => "data",
            Activity::Waiting => "waiting",
            Activity::Upstream => "upstream",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActivityLabel {
    pub activity: &'static str,
}

/// The counts of every session of the process: one gauge per activity, looked up once, so
/// that a session's step costs an atomic add, not a label lookup.
#[derive(Clone, Debug)]
pub struct Activities {
    gauges: [Gauge; 4],
}

impl Activities {
    /// Registers `sessions{activity}` in `registry`, every activity from 0.
    pub fn register(registry: &mut Registry) -> Activities {
        let family = Family::<ActivityLabel, Gauge>::default();
        registry.register(
            "sessions",
            "Client sessions by what each is doing now (command, data, waiting, upstream)",
            family.clone(),
        );
        Activities::of(&family)
    }

    /// The gauges of `family`, one per activity, each from 0.
    fn of(family: &Family<ActivityLabel, Gauge>) -> Activities {
        let gauges = Activity::ALL.map(|a| {
            let label = ActivityLabel {
                activity: a.as_str(),
            };
            family.get_or_create(&label).clone()
        });
        Activities { gauges }
    }

    /// A new session, counted under [`Activity::Command`] until it says otherwise.
    pub fn start(&self) -> Doing {
        self.gauges[Activity::Command as usize].inc();
        Doing {
            counts: self.clone(),
            now: Activity::Command,
        }
    }

    /// Each activity with its count now.
    pub fn counts(&self) -> [(Activity, i64); 4] {
        Activity::ALL.map(|a| (a, self.gauges[a as usize].get()))
    }

    /// [`counts`](Self::counts) in one line, e.g. `command=0 data=1 waiting=0 upstream=3`.
    pub fn summary(&self) -> String {
        self.counts()
            .iter()
            .map(|(a, n)| format!("{}={n}", a.as_str()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// One session's place in [`Activities`]; its count goes when it is dropped.
#[derive(Debug)]
pub struct Doing {
    counts: Activities,
    now: Activity,
}

impl Doing {
    pub fn set(&mut self, activity: Activity) {
        if activity != self.now {
            self.counts.gauges[self.now as usize].dec();
            self.counts.gauges[activity as usize].inc();
            self.now = activity;
        }
    }
}

impl Drop for Doing {
    fn drop(&mut self) {
        self.counts.gauges[self.now as usize].dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_counts_under_one_activity_at_a_time_and_none_once_dropped() {
        let activities = Activities::register(&mut Registry::default());
        let mut one = activities.start();
        let two = activities.start();
        assert_eq!(
            activities.summary(),
            "command=2 data=0 waiting=0 upstream=0"
        );
        one.set(Activity::Data);
        one.set(Activity::Data);
        assert_eq!(
            activities.summary(),
            "command=1 data=1 waiting=0 upstream=0"
        );
        one.set(Activity::Upstream);
        drop(two);
        assert_eq!(
            activities.summary(),
            "command=0 data=0 waiting=0 upstream=1"
        );
        drop(one);
        assert_eq!(
            activities.summary(),
            "command=0 data=0 waiting=0 upstream=0"
        );
    }
}
