//! The fault campaign's short form (`support::campaign`): two relays on a Sentinel-managed
//! Redis, each fault once (a relay killed, a rolling restart, Redis paused, Redis restarted
//! empty, a failover, upstream stalling and dropping mid-DATA), and the checker over every
//! message. Real time, about a minute; only invariants that do not depend on the machine's
//! speed are asserted (the rates and recovery times are printed, measured by
//! `bench/faults.sh`).

use crate::support::campaign::{self, Plan, FAULTS};
use crate::support::campaign_check;

#[test]
fn the_campaign_checker_catches_each_broken_rule() {
    campaign_check::self_test::self_test();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_message_is_lost_or_duplicated_across_relay_redis_and_upstream_faults() {
    let Some(report) = campaign::run(Plan::short()).await else {
        return;
    };
    eprintln!("{}", report.table());
    assert!(
        report.violations.is_empty(),
        "broken invariants:\n{}",
        report.violations.join("\n")
    );
    assert_eq!(report.rows.len(), FAULTS.len() + 1);
    for row in &report.rows {
        assert!(row.offered > 0, "{}: no traffic", row.name);
        assert_eq!((row.lost, row.duplicated), (0, 0), "{row:?}");
    }
    let delivered: usize = report.rows.iter().map(|r| r.delivered).sum();
    assert!(delivered > 0, "nothing delivered");
}
