//! A message's id: 16 hex digits, new for each message.

/// A message's id (in our `Received:` field; a held message's `queued as`): 64 bits, new for
/// each message. std's `RandomState` is keyed from the OS once per thread and stepped on each
/// use, so this costs no system call (a `uuid` v4 cost one `getrandom` per message).
pub fn new_id() -> String {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    let n = state.hash_one(());
    let mut id = String::with_capacity(16);
    for i in (0..16).rev() {
        id.push(char::from(
            b"0123456789abcdef"[(n >> (4 * i)) as usize & 0xf],
        ));
    }
    id
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::new_id;

    /// Every message gets an id of its own (16 hex digits), on one thread and across threads.
    #[test]
    fn ids_differ_per_message() {
        let mut ids: HashSet<String> = (0..1000).map(|_| new_id()).collect();
        let others = std::thread::spawn(|| (0..1000).map(|_| new_id()).collect::<Vec<_>>());
        ids.extend(others.join().unwrap());
        assert_eq!(ids.len(), 2000);
        assert!(ids
            .iter()
            .all(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
