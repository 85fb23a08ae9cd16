//! The checker of the fault campaign (`support::campaign`), over every message, from the
//! clients' attempts and the upstream's records. A client here is a legacy app: it retries a
//! message after any `4xx` or a cut connection until it gets `250` (or `5xx`), so a message
//! may legitimately reach upstream more than once: once per attempt that ended ambiguously
//! (answered "may have been delivered", or cut after its final dot) plus once for its `250`.
//!
//! Per message (id): with `acks` attempts answered `250`, `amb` ambiguous ones and `n` copies
//! upstream,
//! - a `250` means upstream holds it: `acks == 1` needs `n >= 1` (else it is **lost**);
//! - every copy upstream is explained: `n <= acks + amb` (else **duplicated beyond the
//!   client's retries**, or refused-but-delivered when `acks + amb == 0`);
//! - copies without a `250` are counted by kind (uncertain reply, connection cut);
//! - upstream holds nothing no client sent, and no message without its id.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tokio::time::Instant;

use super::invariant::{is_uncertain, Seen};

pub mod self_test;

/// One attempt to send a message, as the client saw it.
#[derive(Clone, Debug)]
pub struct Attempt {
    pub id: String,
    /// The phase (index into the campaign's phases, 0 the baseline) the attempt began in. A
    /// message counts in the phase of its first attempt, an attempt's reply in its own.
    pub phase: usize,
    pub seen: Seen,
    /// When the attempt ended (its reply, or the cut).
    pub at: Instant,
}

/// One phase of the campaign: its name, when its fault began and when it was healed.
#[derive(Clone, Debug)]
pub struct Phase {
    pub name: String,
    pub start: Instant,
    pub healed: Instant,
    pub end: Instant,
}

/// The campaign's figures for one phase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    /// Messages first offered in the phase.
    pub offered: usize,
    /// Of them, messages upstream holds (at least once).
    pub delivered: usize,
    /// Attempts answered with a `4xx` other than "may have been delivered".
    pub refused_4xx: usize,
    /// Attempts answered "may have been delivered" (`upstream_uncertain`), and how many
    /// messages upstream holds with such an attempt and no `250`.
    pub uncertain: usize,
    pub uncertain_held: usize,
    /// Attempts cut after their final dot (no reply), and messages held with no `250` after one.
    pub cut: usize,
    pub cut_held: usize,
    /// Extra upstream copies explained by the client's retries of ambiguous attempts.
    pub retry_copies: usize,
    /// Messages answered `250` that upstream does not hold: must be 0.
    pub lost: usize,
    /// Upstream copies no attempt explains: must be 0.
    pub duplicated: usize,
    /// Messages the client was still retrying when the campaign ended (not lost: never `250`).
    pub unfinished: usize,
    /// The most messages upstream received in any 1 s window starting in the phase, above
    /// the shared layer's `limit + burst`.
    pub worst_excess: usize,
    /// From the heal to the end of the first 1 s window holding 80 % of the shared limit.
    pub recovered_in: Option<Duration>,
    /// The largest resident memory of any relay process sampled in the phase, in KiB.
    pub peak_rss_kib: u64,
}

/// The result of a campaign: a row per phase, and every broken invariant.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub rows: Vec<Row>,
    pub violations: Vec<String>,
    /// Each relay process's memory over its life (see [`check_memory`]).
    pub lives: Vec<Life>,
    /// What the Sentinel-detected failover cost, when the campaign ran one.
    pub failover: Option<Failover>,
}

/// When the failover's steps were seen: the primary killed, the sentinel naming the replica,
/// the replica answering `ROLE` as primary.
#[derive(Clone, Copy, Debug)]
pub struct FailoverTimes {
    pub killed: Instant,
    pub detected: Instant,
    pub promoted: Instant,
}

/// What a failover cost: its steps' times from the kill, and from the kill to the first
/// arrival after the promotion, the longest time upstream received nothing (no writable
/// primary: every message charges Redis) and the attempts that ended, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Failover {
    pub detected_in: Duration,
    pub promoted_in: Duration,
    pub no_delivery: Duration,
    pub refused_4xx: usize,
    pub uncertain: usize,
    pub cut: usize,
}

/// The figures of a failover from its times, the attempts and the upstream's arrivals.
pub fn failover_cost(
    t: FailoverTimes,
    attempts: &[Attempt],
    upstream: &[(Option<String>, Instant)],
) -> Failover {
    let mut arrivals: Vec<Instant> = upstream
        .iter()
        .map(|(_, at)| *at)
        .filter(|at| *at >= t.killed)
        .collect();
    arrivals.sort();
    let back = arrivals
        .iter()
        .copied()
        .find(|at| *at >= t.promoted)
        .unwrap_or(t.promoted);
    let mut no_delivery = Duration::ZERO;
    let mut last = t.killed;
    for at in arrivals.iter().take_while(|at| **at <= back) {
        no_delivery = no_delivery.max(*at - last);
        last = *at;
    }
    let mut f = Failover {
        detected_in: t.detected - t.killed,
        promoted_in: t.promoted - t.killed,
        no_delivery,
        ..Failover::default()
    };
    for a in attempts.iter().filter(|a| a.at >= t.killed && a.at <= back) {
        if is_uncertain_seen(&a.seen) {
            f.uncertain += 1;
        } else if a.seen == Seen::NoReply {
            f.cut += 1;
        } else if matches!(a.seen.code(), Some(400..=499)) {
            f.refused_4xx += 1;
        }
    }
    f
}

/// One sample of a relay process's resident memory (`VmRSS`).
#[derive(Clone, Copy, Debug)]
pub struct RssSample {
    pub phase: usize,
    pub relay: usize,
    /// Which start of that relay the process is (a restart is a new process, a new life).
    pub life: usize,
    pub kib: u64,
}

/// What a relay's resident memory may reach: `peak_kib` at any sample; and over a life of
/// enough samples, the peak of its last third may exceed the peak of its first third by
/// `growth_kib` at most (the first third holds the warm-up: connections, buffers, Redis).
#[derive(Clone, Copy, Debug)]
pub struct MemoryBound {
    pub peak_kib: u64,
    pub growth_kib: u64,
}

/// One relay process's memory: the peaks of the first and last third of its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Life {
    pub relay: usize,
    pub life: usize,
    pub samples: usize,
    pub first_kib: u64,
    pub last_kib: u64,
}

/// Lives with fewer samples are too short for a growth to mean anything.
const GROWTH_MIN_SAMPLES: usize = 12;

/// Fills each row's peak and the report's lives from `samples`, and adds a violation for
/// every sample above `bound.peak_kib` and every life that grew by more than `bound.growth_kib`.
pub fn check_memory(report: &mut Report, samples: &[RssSample], bound: MemoryBound) {
    let mut lives: BTreeMap<(usize, usize), Vec<u64>> = BTreeMap::new();
    for s in samples {
        if let Some(row) = report.rows.get_mut(s.phase) {
            row.peak_rss_kib = row.peak_rss_kib.max(s.kib);
        }
        lives.entry((s.relay, s.life)).or_default().push(s.kib);
        if s.kib > bound.peak_kib {
            report.violations.push(format!(
                "relay {} (life {}): resident {} KiB, above the bound of {} KiB",
                s.relay, s.life, s.kib, bound.peak_kib
            ));
        }
    }
    for ((relay, life), kib) in lives {
        let third = kib.len() / 3;
        let peak = |part: &[u64]| part.iter().copied().max().unwrap_or(0);
        let l = Life {
            relay,
            life,
            samples: kib.len(),
            first_kib: peak(&kib[..third.max(1)]),
            last_kib: peak(&kib[kib.len() - third.max(1)..]),
        };
        if l.samples >= GROWTH_MIN_SAMPLES && l.last_kib > l.first_kib + bound.growth_kib {
            report.violations.push(format!(
                "relay {relay} (life {life}): resident memory grew from {} to {} KiB, more \
                 than {} KiB",
                l.first_kib, l.last_kib, bound.growth_kib
            ));
        }
        report.lives.push(l);
    }
}

/// The shared layer's bound, for the rate measurements.
#[derive(Clone, Copy, Debug)]
pub struct Shared {
    pub limit: usize,
    pub burst: usize,
}

/// Holds the attempts against what upstream holds: `upstream` is each copy's id (`None`
/// without one) and arrival time. `done`: ids whose client stopped (250, 5xx, or gave up).
pub fn check(
    phases: &[Phase],
    attempts: &[Attempt],
    upstream: &[(Option<String>, Instant)],
    unfinished: &[String],
    shared: Shared,
) -> Report {
    let mut report = Report::default();
    let mut copies: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, (id, _)) in upstream.iter().enumerate() {
        match id {
            Some(id) => *copies.entry(id.as_str()).or_default() += 1,
            None => report
                .violations
                .push(format!("upstream copy #{i} has no id")),
        }
    }
    let mut by_id: BTreeMap<&str, Vec<&Attempt>> = BTreeMap::new();
    for a in attempts {
        by_id.entry(a.id.as_str()).or_default().push(a);
    }
    for id in copies.keys() {
        if !by_id.contains_key(id) {
            report
                .violations
                .push(format!("{id}: upstream holds it, no client sent it"));
        }
    }
    report.rows = phases
        .iter()
        .map(|p| Row {
            name: p.name.clone(),
            ..Row::default()
        })
        .collect();
    for (id, tries) in &by_id {
        let n = copies.get(id).copied().unwrap_or(0);
        let acks = tries.iter().filter(|a| a.seen.code() == Some(250)).count();
        let uncertain = tries.iter().filter(|a| is_uncertain_seen(&a.seen)).count();
        let cut = tries.iter().filter(|a| a.seen == Seen::NoReply).count();
        for a in tries {
            let row = &mut report.rows[a.phase];
            if is_uncertain_seen(&a.seen) {
                row.uncertain += 1;
            } else if a.seen == Seen::NoReply {
                row.cut += 1;
            } else if matches!(a.seen.code(), Some(400..=499)) {
                row.refused_4xx += 1;
            }
        }
        let row = &mut report.rows[tries[0].phase];
        row.offered += 1;
        row.delivered += n.min(1);
        if unfinished.iter().any(|u| u == id) {
            row.unfinished += 1;
        }
        if acks > 1 {
            report
                .violations
                .push(format!("{id}: {acks} attempts got 250"));
        }
        if acks >= 1 && n == 0 {
            row.lost += 1;
            report
                .violations
                .push(format!("{id}: answered 250, upstream does not hold it"));
        }
        let explained = acks + uncertain + cut;
        if n > explained {
            row.duplicated += n - explained;
            let seen: Vec<String> = tries.iter().map(|a| format!("{:?}", a.seen)).collect();
            report.violations.push(format!(
                "{id}: upstream holds it {n} times, the client saw {}",
                seen.join(", ")
            ));
        } else if n > 0 {
            row.retry_copies += n - 1;
            if acks == 0 && uncertain > 0 {
                row.uncertain_held += 1;
            } else if acks == 0 {
                row.cut_held += 1;
            }
        }
    }
    let mut times: Vec<Instant> = upstream.iter().map(|(_, at)| *at).collect();
    times.sort();
    for (row, phase) in report.rows.iter_mut().zip(phases) {
        row.worst_excess = worst_excess(&times, phase, shared.limit + shared.burst);
        row.recovered_in = recovered_in(&times, phase.healed, shared.limit);
    }
    report
}

fn is_uncertain_seen(seen: &Seen) -> bool {
    matches!(seen, Seen::Reply(code, text) if is_uncertain(*code, text))
}

/// The largest count of arrivals in a 1 s window starting at an arrival within the phase,
/// above `bound`.
fn worst_excess(times: &[Instant], phase: &Phase, bound: usize) -> usize {
    let second = Duration::from_secs(1);
    let mut worst = 0;
    for (i, t) in times.iter().enumerate() {
        if *t < phase.start || *t >= phase.end {
            continue;
        }
        let n = times[i..].iter().take_while(|u| **u < *t + second).count();
        worst = worst.max(n.saturating_sub(bound));
    }
    worst
}

/// From `healed` to the last arrival of the first 1 s window after it holding `limit * 0.8`
/// arrivals; `None` if there is none.
fn recovered_in(times: &[Instant], healed: Instant, limit: usize) -> Option<Duration> {
    let need = (limit * 4).div_ceil(5).max(1);
    let after: Vec<Instant> = times.iter().copied().filter(|t| *t >= healed).collect();
    (need - 1..after.len())
        .find(|&j| after[j] - after[j + 1 - need] < Duration::from_secs(1))
        .map(|j| after[j] - healed)
}

impl Report {
    /// The table of the campaign, one row per phase.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "| phase | offered | delivered | refused 4xx | uncertain (held) | cut after dot (held) \
             | retry copies | lost | dup beyond retries | unfinished | worst 1 s excess | recovered in \
             | peak RSS (MiB) |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.rows {
            let recovered = match r.recovered_in {
                Some(d) => format!("{:.1} s", d.as_secs_f64()),
                None => "not within the phase".into(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} ({}) | {} ({}) | {} | {} | {} | {} | {} | {} | {:.1} |",
                r.name,
                r.offered,
                r.delivered,
                r.refused_4xx,
                r.uncertain,
                r.uncertain_held,
                r.cut,
                r.cut_held,
                r.retry_copies,
                r.lost,
                r.duplicated,
                r.unfinished,
                r.worst_excess,
                recovered,
                r.peak_rss_kib as f64 / 1024.0
            );
        }
        if let Some(f) = &self.failover {
            let _ = writeln!(
                out,
                "failover: sentinel named the replica {:.2} s after the kill, replica primary at \
                 {:.2} s; longest time without a delivery {:.2} s; until the first delivery after \
                 it, {} attempts refused with 4xx, {} uncertain, {} cut",
                f.detected_in.as_secs_f64(),
                f.promoted_in.as_secs_f64(),
                f.no_delivery.as_secs_f64(),
                f.refused_4xx,
                f.uncertain,
                f.cut
            );
        }
        for l in &self.lives {
            let _ = writeln!(
                out,
                "relay {} life {}: {} samples, resident peak {:.1} MiB in the first third, \
                 {:.1} MiB in the last",
                l.relay,
                l.life,
                l.samples,
                l.first_kib as f64 / 1024.0,
                l.last_kib as f64 / 1024.0
            );
        }
        out
    }
}
