//! Password hashes for `[smtp.auth] users`: argon2id in PHC string form
//! (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`), the algorithm and parameters OWASP
//! recommends. Hashing is deliberately slow and takes its `m` KiB of memory (19 MiB by
//! default): sessions check passwords through one [`Verifier`], which runs at most a few
//! checks at a time on the blocking pool and reuses their memory, so a flood of AUTH
//! attempts queues instead of taking a hash's memory each.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{Output, PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use tokio::sync::Semaphore;

/// The PHC string of `password` with a fresh random salt (`mailsluice hash-password`).
pub fn hash(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::generate(&mut OsRng);
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

/// Whether `password` matches the PHC string `hash`, computed with the parameters the hash
/// names. A hash that does not parse matches nothing.
pub fn matches(hash: &str, password: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| {
        Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok()
    })
}

/// Checks passwords for every session of the process, at most `bound` at once: each check
/// holds a slot for as long as it hashes (even when the session waiting for it is gone), and
/// hashes in the memory of its slot, kept for the next check rather than allocated anew (a
/// freed 19 MiB buffer is not always given back to the system by the allocator).
pub struct Verifier {
    slots: Arc<Semaphore>,
    bound: usize,
    /// Hash memory of the slots not hashing now: at most `bound` buffers.
    memory: Mutex<Vec<Vec<Block>>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    checks: AtomicU64,
}

impl Verifier {
    pub fn new(bound: usize) -> Arc<Verifier> {
        let bound = bound.max(1);
        Arc::new(Verifier {
            slots: Arc::new(Semaphore::new(bound)),
            bound,
            memory: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
            checks: AtomicU64::new(0),
        })
    }

    /// How many checks may run at once.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The most checks that ever hashed at the same time (never above `bound`).
    pub fn most_in_flight(&self) -> usize {
        self.most_in_flight.load(Ordering::SeqCst)
    }

    /// Checks started so far.
    pub fn checks(&self) -> u64 {
        self.checks.load(Ordering::SeqCst)
    }

    /// Whether `password` matches the PHC string `hash`; waits for a free slot first.
    pub async fn matches(self: &Arc<Self>, hash: String, password: String) -> bool {
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return false;
        };
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            this.check(&hash, &password)
        })
        .await
        .unwrap_or(false)
    }

    /// One check on the blocking pool, in a slot's memory.
    fn check(&self, hash: &str, password: &str) -> bool {
        self.checks.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let mut memory = self.lock_memory().pop().unwrap_or_default();
        let ok = PasswordHash::new(hash).is_ok_and(|h| matches_in(&h, password, &mut memory));
        self.lock_memory().push(memory);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        ok
    }

    fn lock_memory(&self) -> std::sync::MutexGuard<'_, Vec<Vec<Block>>> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What `Argon2::verify_password` does, hashing in `memory` (grown to the hash's `m` once).
fn matches_in(hash: &PasswordHash, password: &str, memory: &mut Vec<Block>) -> bool {
    let (Some(expected), Some(salt)) = (hash.hash, hash.salt) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (Algorithm::try_from(hash.algorithm), Params::try_from(hash))
    else {
        return false;
    };
    let version = match hash.version.map(Version::try_from).transpose() {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => return false,
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    if memory.len() < params.block_count() {
        memory.resize(params.block_count(), Block::new());
    }
    let mut out = vec![0u8; expected.len()];
    let argon = Argon2::new(algorithm, version, params);
    argon
        .hash_password_into_with_memory(password.as_bytes(), salt, &mut out, &mut memory[..])
        .is_ok()
        && Output::new(&out).is_ok_and(|out| out == expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_then_verify() {
        let h = hash("correct horse").unwrap();
        assert!(h.starts_with("$argon2id$v=19$"), "{h}");
        assert!(matches(&h, "correct horse"));
        assert!(!matches(&h, "correct horse "));
        assert!(!matches("not a hash", "x"));
        assert_ne!(h, hash("correct horse").unwrap(), "salted");
    }

    #[tokio::test]
    async fn verifier_agrees_with_argon2_and_reuses_its_memory() {
        let v = Verifier::new(1);
        let h = hash("correct horse").unwrap();
        assert!(v.matches(h.clone(), "correct horse".into()).await);
        assert!(!v.matches(h, "correct horse ".into()).await);
        assert!(!v.matches("not a hash".into(), "x".into()).await);
        assert_eq!(v.checks(), 3);
        assert_eq!(v.most_in_flight(), 1);
        assert_eq!(v.lock_memory().len(), 1, "one slot, one buffer");
    }
}
