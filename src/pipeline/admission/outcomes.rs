//! Every outcome in one list, `Outcome::ALL`, for whatever lists them all (the status page,
//! the test that docs/operating.md's Outcomes table is the code's): the relay's own
//! (`Outcome::CORE`, `message/outcome.rs`) with the steps' own ([`STEP_OUTCOMES`]) after
//! `upstream_paused`, the last of the relay's own admission outcomes. It is here, not in
//! `message`, because only the pipeline knows its steps.

use super::STEP_OUTCOMES;
use crate::message::Outcome;

/// How many outcomes there are.
const COUNT: usize = Outcome::CORE.len() + STEP_OUTCOMES.len();

impl Outcome {
    /// Every outcome, in the order docs/operating.md lists them.
    pub const ALL: [Outcome; COUNT] = {
        let mut all = [Outcome::Delivered; COUNT];
        let (mut core, mut at) = (0, 0);
        while core < Outcome::CORE.len() {
            all[at] = Outcome::CORE[core];
            at += 1;
            if matches!(Outcome::CORE[core], Outcome::UpstreamPaused) {
                let mut step = 0;
                while step < STEP_OUTCOMES.len() {
                    all[at] = STEP_OUTCOMES[step];
                    (at, step) = (at + 1, step + 1);
                }
            }
            core += 1;
        }
        assert!(at == COUNT, "the steps' outcomes follow upstream_paused");
        all
    };
}

#[cfg(test)]
mod tests {
    use crate::message::Outcome;

    #[test]
    fn every_outcome_is_listed_once_with_a_name_of_its_own() {
        let names: std::collections::BTreeSet<_> =
            Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(names.len(), Outcome::ALL.len());
        assert!(names
            .iter()
            .all(|n| n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')));
        assert!(Outcome::CORE.iter().all(|o| Outcome::ALL.contains(o)));
    }
}
