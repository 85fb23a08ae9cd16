//! What the test machine offers: free ports, scratch directories, installed programs.

use std::path::PathBuf;
use std::process::Command;

/// A port of 127.0.0.1 that was free a moment ago, for configs and programs that must name
/// their address.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A path of its own under the system temp dir, `mailsluice-<name>-<pid>-<uuid>`, not yet
/// created.
pub fn scratch_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "mailsluice-{name}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ))
}

/// Whether an external program the test drives is installed. Without it the test is
/// skipped through [`skip`] (a failure unless the developer allows skips).
pub fn have_program(name: &str) -> bool {
    have_programs(&[name], name)
}

/// [`have_program`] for several programs, named by the first, installed by the Debian
/// `packages` named in the message.
pub fn have_programs(programs: &[&str], packages: &str) -> bool {
    let found = programs.iter().all(|p| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !found {
        let name = programs[0];
        skip(&format!(
            "`{name}` is not installed (apt-get install {packages})"
        ));
    }
    found
}

/// The one place a test decides to skip (its caller then returns early): a skipped test looks
/// like a pass, so it is a failure unless the developer says skips are fine with
/// `MAILSLUICE_ALLOW_SKIP=1` (docs/development.md), and always under CI (`CI=true`), which
/// installs everything the tests need.
pub fn skip(why: &str) {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    assert!(!ci, "{why}: required under CI (bash .ci/run installs it)");
    let allowed = std::env::var("MAILSLUICE_ALLOW_SKIP").as_deref() == Ok("1");
    assert!(
        allowed,
        "{why}: the test cannot run here; MAILSLUICE_ALLOW_SKIP=1 skips it"
    );
    eprintln!("\n*** SKIPPED: {why} ***\n");
}
