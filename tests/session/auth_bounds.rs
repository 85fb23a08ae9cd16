//! AUTH under a flood: password checks run a bounded number at once for the whole relay
//! (each takes its hash's memory), and an address's attempts count from the start of their
//! check, so parallel guesses past `max_failures` cost no check at all.

use std::sync::Arc;
use std::time::Duration;

use argon2::password_hash::{PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use mailsluice::inbound::password::Verifier;

use crate::support::auth::plain;
use crate::support::memory::MemoryForwarder;
use crate::support::relay::{memory_relay, Client, Relay};

/// A hash that takes 4 MiB and a few milliseconds per check: long enough for checks sent
/// together to overlap when nothing bounds them.
fn hash(password: &str) -> String {
    let params = Params::new(4096, 1, 1, None).unwrap();
    let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
    let salt = SaltString::encode_b64(b"test-salt-16byte").unwrap();
    let hash = argon.hash_password(password.as_bytes(), &salt).unwrap();
    hash.to_string()
}

/// A relay where loopback is untrusted and may AUTH in clear, with `auth` keys.
async fn start(auth: &str) -> (Relay, Arc<MemoryForwarder>) {
    let smtp = format!(
        "trusted_networks = [\"192.0.2.0/24\"]\nallow_plaintext_auth = true\nmax_errors = 100\n\
         [smtp.auth]\nusers = [{{ user = \"app\", password_hash = \"{}\" }}]\n{auth}\n",
        hash("s3cret")
    );
    memory_relay(&smtp, "").await
}

/// The relay's password checker (its context exists once a client has connected).
fn checks(relay: &Relay) -> Arc<Verifier> {
    relay
        .live
        .current()
        .expect("running")
        .services
        .auth
        .checks
        .clone()
}

/// `n` clients at once, each sending one AUTH PLAIN with `password`; their replies' codes.
async fn parallel_logins(relay: &Relay, n: usize, password: &str) -> Vec<u16> {
    let mut clients = Vec::new();
    for _ in 0..n {
        let mut c = relay.client().await;
        assert_eq!(c.cmd("EHLO x").await.0, 250);
        clients.push(c);
    }
    let line = format!("AUTH PLAIN {}\r\n", plain("app", password));
    for c in &mut clients {
        c.send(line.as_bytes()).await;
    }
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut c| tokio::spawn(async move { c.reply().await.0 }))
        .collect();
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    codes
}

async fn login(relay: &Relay, password: &str) -> u16 {
    let mut c: Client = relay.client().await;
    c.cmd("EHLO x").await;
    c.cmd(&format!("AUTH PLAIN {}", plain("app", password)))
        .await
        .0
}

#[tokio::test]
async fn parallel_checks_never_pass_the_bound() {
    let (relay, _) =
        start("failure_delay_ms = 0\nmax_failures = 100000\nmax_parallel_checks = 2").await;
    let codes = parallel_logins(&relay, 200, "wrong").await;
    assert!(codes.iter().all(|&c| c == 535), "{codes:?}");
    let v = checks(&relay);
    assert_eq!((v.bound(), v.checks()), (2, 200));
    assert!(
        v.most_in_flight() <= 2,
        "{} checks hashed at once",
        v.most_in_flight()
    );
    assert_eq!(login(&relay, "s3cret").await, 235);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn parallel_guesses_are_locked_out_after_max_failures_starts() {
    let auth = "failure_delay_ms = 1000\nmax_failures = 5\nfailure_window_ms = 60000\n\
                lockout_ms = 600000\nmax_parallel_checks = 2";
    let (relay, _) = start(auth).await;
    let codes = parallel_logins(&relay, 200, "wrong").await;
    let refused = codes.iter().filter(|&&c| c == 421).count();
    let failed = codes.iter().filter(|&&c| c == 535).count();
    assert_eq!(refused + failed, 200, "{codes:?}");
    assert!(failed <= 4, "{failed} answered 535");
    assert_eq!(
        checks(&relay).checks(),
        5,
        "only the first five were checked"
    );
    // Locked out: the right password too.
    assert_eq!(login(&relay, "s3cret").await, 421);
    tokio::time::sleep(Duration::from_secs(601)).await;
    assert_eq!(login(&relay, "s3cret").await, 235);
    relay.stop().await;
}
