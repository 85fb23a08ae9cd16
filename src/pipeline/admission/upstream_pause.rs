//! The route's upstream paused: after its quota reply (`upstream::Pause`), or for its
//! account's day quota (`serve::account`). Nothing goes to it until the pause ends; with a
//! fallback, the message goes there instead (`pipeline::deliver`). A pause that is over lets
//! one message through as its probe.

use std::time::Duration;

use super::{NotAdmitted, Paused, Scope};
use crate::message::Outcome;
use crate::reply::{self, Reply};
use crate::upstream::{Admission, Probe, Upstream};

pub(super) const OUTCOME: Outcome = Outcome::UpstreamPaused;

/// Go (as the probe of a pause that is over, maybe), or the time left of the pause.
pub(super) async fn check(upstream: &Upstream) -> Result<Option<Probe>, NotAdmitted> {
    match upstream.pause.admit().await {
        Admission::Open => Ok(None),
        Admission::Probe(probe) => Ok(Some(probe)),
        Admission::Paused(left) => Err(NotAdmitted::Paused(Paused {
            scope: Scope::Upstream,
            left: Some(left),
        })),
    }
}

/// `451 4.7.1`, the words upstream's quota reply gets on the upstream leg too.
pub(super) fn reply(left: Option<Duration>) -> Reply {
    reply::upstream_quota_exhausted(left.unwrap_or_default())
}
