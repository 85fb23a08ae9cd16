use super::*;

const S: Nanos = 1_000_000_000;
const A: Aimd = Aimd {
    limit: 20,
    min: 2,
    interval: S,
    rule: Adapt::Multiplicative,
};
const M: Aimd = Aimd {
    limit: 100,
    min: 2,
    rule: Adapt::Measured,
    ..A
};

#[test]
fn a_reply_cuts_once_per_interval_down_to_the_floor() {
    let (l, cut) = A.throttled(Learned::default(), 5 * S, 1);
    assert_eq!(cut, Some((20, 14)));
    let (l, cut) = A.throttled(l, 5 * S + S / 2, 1);
    assert_eq!((cut, A.effective(l, 5 * S + S / 2)), (None, 14));
    let (mut l, cut) = A.throttled(l, 6 * S, 1);
    assert_eq!(cut, Some((14, 9)));
    for i in 7..20 {
        l = A.throttled(l, i * S, 1).0;
    }
    assert_eq!(A.effective(l, 19 * S), 2);
}

#[test]
fn quiet_intervals_bring_the_limit_back_slowly_to_the_configured_one() {
    let (l, _) = A.throttled(Learned::default(), 0, 1);
    assert_eq!(A.effective(l, 9 * S + S / 2), 14);
    assert_eq!(A.effective(l, 10 * S), 15);
    assert_eq!(A.effective(l, 12 * S), 17);
    assert_eq!(A.effective(l, 100 * S), 20);
    // A later reply cuts from the recovered value.
    assert_eq!(A.throttled(l, 12 * S, 1).1, Some((17, 11)));
}

/// `n` grants of one token, evenly over `[from, from + S)`.
fn sent(mut l: Learned, from: Nanos, n: u64) -> Learned {
    for k in 0..n {
        l = M.granted(l, from + k * S / n, 1);
    }
    l
}

#[test]
fn measured_cuts_at_once_to_nine_tenths_of_what_upstream_took() {
    // 100 sent over a second, 90 of them throttled: upstream took 10.
    let mut l = sent(Learned::default(), 0, 100);
    let mut last = None;
    for _ in 0..90 {
        let (next, cut) = M.throttled(l, S - 1, 1);
        l = next;
        last = cut.or(last);
    }
    assert_eq!(M.effective(l, S), 9);
    assert_eq!(last.map(|c| c.1), Some(9));
    // Never up: a later reply measuring more leaves the limit.
    let l = sent(l, S, 50);
    assert_eq!(M.throttled(l, 2 * S - 1, 1).1, None);
}

#[test]
fn measured_needs_a_sample_and_keeps_the_floor() {
    // A lone reply after three messages: no measurement, no cut.
    let l = sent(Learned::default(), 0, 3);
    let (l, cut) = M.throttled(l, S / 2, 1);
    assert_eq!((cut, M.effective(l, S)), (None, 100));
    assert_eq!(l.value, 0, "nothing learned");
    // Twenty sent, all throttled: the floor.
    let l = sent(Learned::default(), 0, 20);
    let (l, _) = (0..20).fold((l, None), |(l, _), _| M.throttled(l, S - 1, 1));
    assert_eq!(M.effective(l, S), 2);
}

#[test]
fn measured_reads_the_previous_window_by_its_part_still_inside() {
    let l = sent(Learned::default(), 0, 40);
    // At 1.5 s: half of the previous window's 40, and nothing since; one of them refused.
    assert_eq!(M.measured(l, S + S / 2), Some(20));
    let (l, cut) = M.throttled(l, S + S / 2, 1);
    assert_eq!(cut, Some((100, 17)));
    // Two windows later the old counts are gone: no sample.
    assert_eq!(M.measured(l, 4 * S), None);
    // Recovery is the same additive one as the multiplicative rule's.
    assert_eq!(M.effective(l, S + S / 2 + 10 * S), 22);
}
