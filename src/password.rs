//! Password hashes for `[smtp.auth] users`: argon2id in PHC string form
//! (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`), the algorithm and parameters OWASP
//! recommends. Hashing is deliberately slow; callers on the async runtime run it with
//! `spawn_blocking` so one login never stalls other sessions.

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

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
}
