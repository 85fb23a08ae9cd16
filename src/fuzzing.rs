//! Support for the fuzz targets (`fuzz/`) and the property test of the session
//! (`tests/session/session_props.rs`): a whole session run over an in-memory stream, bytes in,
//! replies out, with a forwarder that keeps what it is given. Not part of the API.

use std::sync::{Arc, Mutex, OnceLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::Config;
use crate::state::context::Context;
use crate::state::deps::Deps;
use crate::upstream::{Accepted, ForwardFuture, Forwarder, Outgoing};

/// A forwarder that accepts everything and keeps the messages.
#[derive(Default)]
pub struct KeepingForwarder {
    pub messages: Mutex<Vec<Vec<u8>>>,
}

impl Forwarder for KeepingForwarder {
    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        let pieces = outgoing.pieces;
        Box::pin(async move {
            let mut messages = self.messages.lock().unwrap_or_else(|e| e.into_inner());
            messages.push(pieces.concat());
            Ok(Accepted::new(format!("Ok {}", messages.len())))
        })
    }
}

/// The user `fuzz` with password `fuzz`, hashed with tiny argon2 parameters so that a
/// fuzzer reaching AUTH is not slowed down by it.
pub fn user_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| {
        use argon2::password_hash::{PasswordHasher, SaltString};
        let params = argon2::Params::new(8, 1, 1, None).expect("valid parameters");
        let argon =
            argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
        let salt = SaltString::encode_b64(b"fuzz-salt-16byte").expect("valid salt");
        argon
            .hash_password(b"fuzz", &salt)
            .expect("hashing")
            .to_string()
    })
}

/// The relay config the fuzzers run: AUTH in clear (so they can reach it), no failure delay,
/// small bounds so memory stays small, and a header-keyed layer that never makes anyone wait.
pub fn config() -> Config {
    let text = format!(
        "[smtp]\nlisten = [\"127.0.0.1:0\"]\nhostname = \"fuzz.test\"\n\
         max_message_bytes = 65536\nmax_line_bytes = 1024\nmax_recipients = 20\n\
         max_errors = 1000\nallow_plaintext_auth = true\n\
         [smtp.auth]\nfailure_delay_ms = 0\nmax_failures = 1000000\n\
         users = [{{ user = \"fuzz\", password_hash = \"{}\", tenant = \"t\" }}]\n\
         [upstream]\nurl = \"file://unused\"\n\
         [[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 1000000000\n\
         mode = \"reject\"\n",
        user_hash()
    );
    Config::parse(&text).expect("the fuzzing config is valid")
}

/// A context for `session`, and the forwarder to look at afterwards.
pub fn context() -> (Arc<Context>, Arc<KeepingForwarder>) {
    let forwarder = Arc::new(KeepingForwarder::default());
    let config = Arc::new(config());
    let upstreams = crate::upstream::Upstreams::with_first(&config, forwarder.clone())
        .expect("the fuzzing config's upstream");
    let deps = Deps::new(config, upstreams);
    (Arc::new(Context::new(deps)), forwarder)
}

/// Runs one session: the client sends `input`, then closes its side; returns every byte the
/// relay wrote. The session ends at the client's close at the latest, so this never waits
/// on a timer.
pub async fn session(ctx: Arc<Context>, input: &[u8]) -> Vec<u8> {
    let (client, server) = tokio::io::duplex(16 * 1024);
    let peer = "127.0.0.1:2525".parse().expect("an address");
    let (_trigger, shutdown) = crate::state::shutdown::channel();
    let serve = crate::smtp::serve(ctx, Box::new(server), peer, shutdown, false);
    let (mut rd, mut wr) = tokio::io::split(client);
    let write = async move {
        // The relay may close first (QUIT, too many errors): the rest is not sent.
        let _ = wr.write_all(input).await;
        let _ = wr.shutdown().await;
    };
    let read = async move {
        let mut out = Vec::new();
        let _ = rd.read_to_end(&mut out).await;
        out
    };
    let ((), (), out) = tokio::join!(serve, write, read);
    out
}

/// `session` on a fresh context in a runtime of its own: replies, and the messages relayed.
pub fn run(input: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (ctx, forwarder) = context();
    let out = runtime.block_on(session(ctx, input));
    let messages =
        std::mem::take(&mut *forwarder.messages.lock().unwrap_or_else(|e| e.into_inner()));
    (out, messages)
}
