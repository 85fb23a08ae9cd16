use super::*;

/// The reader fed one byte at a time through the state machine alone, runs never taken.
fn feed_bytewise(r: &mut DataReader, input: &[u8]) -> Option<usize> {
    (0..input.len()).find(|&i| r.step(input[i])).map(|i| i + 1)
}

/// `input`, split at `cut`, read with runs and byte by byte by two readers with the same
/// bounds: the same bytes consumed, the same message or the same problem.
fn as_the_state_machine_does(
    input: &[u8],
    cut: usize,
    max_bytes: usize,
    max_line: usize,
    budget: usize,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let cut = cut.min(input.len());
    let reader = || {
        let pool = Arc::new(Semaphore::new(budget));
        DataReader::new(max_bytes, max_line).with_budget(pool)
    };
    let (mut fast, mut slow) = (reader(), reader());
    let first = (
        fast.feed(&input[..cut]),
        feed_bytewise(&mut slow, &input[..cut]),
    );
    proptest::prop_assert_eq!(first.0, first.1);
    if first.0.is_none() {
        let rest = &input[cut..];
        proptest::prop_assert_eq!(fast.feed(rest), feed_bytewise(&mut slow, rest));
    }
    for r in [&fast, &slow] {
        let held = r.budget.as_ref().map_or(0, |b| b.bytes);
        proptest::prop_assert!(r.body.capacity() <= held, "allocated past the budget");
    }
    proptest::prop_assert_eq!(fast.finish(), slow.finish());
    Ok(())
}

proptest::proptest! {
    /// Taking plain bytes as runs changes nothing: the same bytes consumed, the same
    /// message or the same problem, for any bytes split anywhere, at any bound.
    #[test]
    fn runs_read_as_the_state_machine_does(
        input in proptest::collection::vec(
            proptest::sample::select(b"ab.\r\n\0 ".to_vec()), 0..200),
        cut in 0usize..200,
        max_bytes in 0usize..120,
        max_line in 1usize..40,
        budget in 0usize..150,
    ) {
        as_the_state_machine_does(&input, cut, max_bytes, max_line, budget)?;
    }
}

proptest::proptest! {
    /// The same for messages of whole lines, most of them plain, their lengths near the line
    /// bound: runs that cross line breaks count each line as the state machine does.
    #[test]
    fn runs_across_lines_count_each_line(
        lines in proptest::collection::vec(
            (0usize..12, proptest::sample::select(b"aaaa.\r\n\0".to_vec())), 0..24),
        cut in 0usize..400,
        max_bytes in 100usize..500,
        max_line in 1usize..16,
        budget in 100usize..500,
    ) {
        // Each line: plain bytes, one chosen byte first (a dot, a stray CR, ...), then CRLF.
        let mut input = Vec::new();
        for (len, first) in lines {
            input.push(first);
            input.extend(std::iter::repeat_n(b'a', len));
            input.extend_from_slice(b"\r\n");
        }
        input.extend_from_slice(b".\r\n");
        as_the_state_machine_does(&input, cut, max_bytes, max_line, budget)?;
    }
}

fn read(input: &[u8]) -> (Option<usize>, Result<Vec<u8>, DataProblem>) {
    let mut r = DataReader::new(1 << 20, 1000);
    let used = r.feed(input);
    (used, r.finish())
}

#[test]
fn a_message_starting_with_a_continuation_line_is_refused() {
    for start in [&b" x"[..], b"\tx"] {
        let mut input = start.to_vec();
        input.extend_from_slice(b"\r\nSubject: s\r\n\r\nb\r\n.\r\n");
        assert_eq!(read(&input).1, Err(DataProblem::LeadingContinuation));
    }
    assert!(read(b"Subject: s\r\n \tfolded\r\n\r\n b\r\n.\r\n")
        .1
        .is_ok());
}

#[test]
fn crlf_dot_crlf_ends_and_dots_are_unstuffed() {
    let (used, body) = read(b"a\r\n..b\r\n..\r\n.\r\nMAIL");
    assert_eq!(used, Some(15));
    assert_eq!(body.unwrap(), b"a\r\n.b\r\n.\r\n");
}

#[test]
fn empty_message_ends_at_once() {
    assert_eq!(read(b".\r\n"), (Some(3), Ok(vec![])));
}

#[test]
fn terminator_split_across_reads_is_found() {
    let mut r = DataReader::new(100, 100);
    assert_eq!(r.feed(b"x\r"), None);
    assert_eq!(r.feed(b"\n."), None);
    assert_eq!(r.feed(b"\r"), None);
    assert_eq!(r.feed(b"\nQUIT"), Some(1));
    assert_eq!(r.finish().unwrap(), b"x\r\n");
}

#[test]
fn bare_newlines_are_refused_at_the_end() {
    assert_eq!(read(b"a\nb\r\n.\r\n").1, Err(DataProblem::BareNewline));
    assert_eq!(read(b"a\rb\r\n.\r\n").1, Err(DataProblem::BareNewline));
    assert_eq!(read(b"a\r\n.\rb\r\n.\r\n").1, Err(DataProblem::BareNewline));
}

#[test]
fn nul_anywhere_is_refused_at_the_end() {
    assert_eq!(read(b"a\0b\r\n.\r\n").1, Err(DataProblem::Nul));
    assert_eq!(read(b"a\r\n\0.\r\n.\r\n").1, Err(DataProblem::Nul));
    assert_eq!(read(b"a\r\n.\0\r\n.\r\n").1, Err(DataProblem::Nul));
}

#[test]
fn size_bound_is_exact() {
    let mut at = DataReader::new(5, 100);
    assert!(at.feed(b"abc\r\n.\r\n").is_some());
    assert_eq!(at.finish().unwrap(), b"abc\r\n");
    let mut over = DataReader::new(4, 100);
    assert!(over.feed(b"abc\r\n.\r\n").is_some());
    assert_eq!(over.finish(), Err(DataProblem::TooBig));
}

#[test]
fn bytes_kept_are_taken_from_the_budget_and_given_back() {
    let pool = Arc::new(Semaphore::new(BUDGET_STEP + 10));
    let mut a = DataReader::new(1 << 20, 100).with_budget(pool.clone());
    assert!(a.feed(b"abc\r\n.\r\n").is_some());
    let held = a.take_budget();
    assert_eq!(pool.available_permits(), 10, "one step taken");
    assert_eq!(a.finish().unwrap(), b"abc\r\n");
    // No room for a second message while the first is held: read to its end, refused.
    let mut b = DataReader::new(1 << 20, 100).with_budget(pool.clone());
    assert!(b.feed(b"abc\r\n.\r\n").is_some());
    assert_eq!(b.finish(), Err(DataProblem::NoRoom));
    drop(held);
    assert_eq!(pool.available_permits(), BUDGET_STEP + 10, "given back");
}

#[test]
fn a_small_message_holds_a_small_buffer_and_none_past_its_room() {
    let pool = Arc::new(Semaphore::new(4 * BUDGET_STEP));
    let mut r = DataReader::new(1 << 20, 1 << 20).with_budget(pool.clone());
    r.feed(&[b'a'; 100]);
    assert_eq!(pool.available_permits(), 3 * BUDGET_STEP, "a step held");
    assert_eq!(
        r.body.capacity(),
        FIRST_ROOM,
        "but a small buffer allocated"
    );
    r.feed(&vec![b'a'; BUDGET_STEP]);
    assert_eq!(pool.available_permits(), 2 * BUDGET_STEP, "a second step");
    assert_eq!(
        r.body.capacity(),
        2 * BUDGET_STEP,
        "grown to a power of two, within the room held"
    );
    assert!(r.feed(b"\r\n.\r\n").is_some());
    assert_eq!(r.finish().unwrap().len(), BUDGET_STEP + 102);
}

#[test]
fn a_message_without_room_gives_back_what_it_held_at_once() {
    let pool = Arc::new(Semaphore::new(2 * BUDGET_STEP));
    let mut a = DataReader::new(1 << 20, 1 << 20).with_budget(pool.clone());
    a.feed(b"a");
    let mut b = DataReader::new(1 << 20, 1 << 20).with_budget(pool.clone());
    b.feed(&vec![b'b'; BUDGET_STEP]);
    assert_eq!(pool.available_permits(), 0);
    b.feed(b"b");
    assert_eq!(
        pool.available_permits(),
        BUDGET_STEP,
        "b gave its step back"
    );
    assert!(b.is_empty(), "and its bytes");
    assert!(b.feed(b"\r\n.\r\n").is_some());
    assert_eq!(b.finish(), Err(DataProblem::NoRoom));
    // a goes on into the room b left.
    a.feed(&vec![b'a'; BUDGET_STEP]);
    assert!(a.feed(b"\r\n.\r\n").is_some());
    assert_eq!(a.finish().unwrap().len(), BUDGET_STEP + 3);
}

#[test]
fn line_bound_counts_crlf() {
    let mut at = DataReader::new(100, 5);
    at.feed(b"abc\r\n.\r\n").unwrap();
    assert!(at.finish().is_ok());
    let mut over = DataReader::new(100, 4);
    over.feed(b"abc\r\n.\r\n").unwrap();
    assert_eq!(over.finish(), Err(DataProblem::LineTooLong));
}
