//! The deployment files (`deploy/compose.yaml`, `deploy/kubernetes/`) parse, their relay
//! configs pass `mailsluice check`, and the manifests hold what they promise (two replicas,
//! probes, a grace period above `shutdown_grace_ms`, ...): `tools/check_deploy.py` checks
//! them; here it runs on the shipped files, and on copies broken in one place each, which it
//! must refuse. `.ci/kube-play` runs the manifests themselves under `podman kube play`.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::host::{have_programs, scratch_path};
use crate::support::process::bin;

fn check_deploy(dir: &Path) -> Output {
    Command::new("python3")
        .args(["tools/check_deploy.py", "--mailsluice"])
        .arg(bin())
        .arg("--deploy")
        .arg(dir)
        .output()
        .expect("python3 runs")
}

/// python3 with PyYAML; without it the test says so loudly, and fails under CI.
fn have_python_yaml() -> bool {
    if !have_programs(&["python3"], "python3 python3-yaml") {
        return false;
    }
    let found = (Command::new("python3").args(["-c", "import yaml"]).output())
        .is_ok_and(|o| o.status.success());
    if !found {
        let ci = std::env::var("CI").as_deref() == Ok("true");
        assert!(
            !ci,
            "PyYAML is required under CI (bash .ci/run installs python3-yaml)"
        );
        eprintln!("\n*** SKIPPED: python3 has no yaml module (apt-get install python3-yaml) ***\n");
    }
    found
}

/// A copy of `deploy/` with `from` replaced by `to` in `file` (which must hold it).
fn broken_copy(file: &str, from: &str, to: &str) -> std::path::PathBuf {
    let dir = scratch_path("deploy");
    std::fs::create_dir_all(dir.join("kubernetes")).unwrap();
    for entry in ["compose.yaml"].into_iter().map(String::from).chain(
        (std::fs::read_dir("deploy/kubernetes").unwrap())
            .map(|e| format!("kubernetes/{}", e.unwrap().file_name().to_string_lossy())),
    ) {
        let text = std::fs::read_to_string(Path::new("deploy").join(&entry)).unwrap();
        let text = match entry == file {
            true => {
                assert!(text.contains(from), "{file} holds {from:?}");
                text.replace(from, to)
            }
            false => text,
        };
        std::fs::write(dir.join(&entry), text).unwrap();
    }
    dir
}

#[test]
fn shipped_deployment_files_pass_their_checks() {
    if !have_python_yaml() {
        return;
    }
    let out = check_deploy(Path::new("deploy"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "ok: compose: `mailsluice check` passes",
        "ok: kubernetes ConfigMap: `mailsluice check` passes",
        "ok: kubernetes: terminationGracePeriodSeconds (30 s) above shutdown_grace_ms (20000 ms)",
        "check_deploy: all ok",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
}

#[test]
fn a_broken_deployment_file_is_refused() {
    if !have_python_yaml() {
        return;
    }
    let cases = [
        (
            "kubernetes/mailsluice.yaml",
            "terminationGracePeriodSeconds: 30",
            "terminationGracePeriodSeconds: 15",
            "terminationGracePeriodSeconds (15 s) above shutdown_grace_ms",
        ),
        (
            "kubernetes/configmap.yaml",
            "interval_ms = 1000\n    store",
            "interval_ms = 0\n    store",
            "kubernetes ConfigMap: `mailsluice check` passes",
        ),
        (
            "compose.yaml",
            "on_error = \"local\"",
            "on_error = \"sometimes\"",
            "compose: `mailsluice check` passes",
        ),
        (
            "kubernetes/mailsluice.yaml",
            "readOnlyRootFilesystem: true",
            "readOnlyRootFilesystem: false",
            "read-only root filesystem",
        ),
    ];
    for (file, from, to, named) in cases {
        let dir = broken_copy(file, from, to);
        let out = check_deploy(&dir);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{file} with {to:?} passed");
        assert!(
            err.contains("FAILED") && err.contains(named),
            "{named:?} in {err}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
