//! Users for AUTH tests. Their hashes use small argon2 parameters so a test login costs
//! microseconds; the relay reads the parameters from the hash, as it does for real ones.

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use base64::Engine;

pub fn cheap_hash(password: &str) -> String {
    let params = Params::new(64, 1, 1, None).unwrap();
    let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
    let salt = SaltString::encode_b64(b"test-salt-16byte").unwrap();
    argon
        .hash_password(password.as_bytes(), &salt)
        .unwrap()
        .to_string()
}

/// `[smtp.auth]` with `users`, each `(user, password, extra fields)` such as
/// `tenant = "acme"`, and `extra` keys (e.g. `failure_delay_ms = 0`).
pub fn auth_config(users: &[(&str, &str, &str)], extra: &str) -> String {
    let entries: Vec<String> = users
        .iter()
        .map(|(user, password, fields)| {
            let fields = if fields.is_empty() {
                String::new()
            } else {
                format!(", {fields}")
            };
            format!(
                "{{ user = \"{user}\", password_hash = \"{}\"{fields} }}",
                cheap_hash(password)
            )
        })
        .collect();
    format!("[smtp.auth]\nusers = [{}]\n{extra}\n", entries.join(", "))
}

/// The AUTH PLAIN initial response for `user` and `password`.
pub fn plain(user: &str, password: &str) -> String {
    b64(format!("\0{user}\0{password}").as_bytes())
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
