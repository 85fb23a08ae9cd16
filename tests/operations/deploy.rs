//! The deployment files (`deploy/compose.yaml`, `deploy/kubernetes/` and its components,
//! `deploy/eks/`, `deploy/hold/`, `deploy/hold-s3/` with its AWS side, the checklist
//! `deploy/VALUES.md`) parse, their relay configs pass `mailsluice check`, and the manifests, as
//! kustomize renders them, hold what they promise (probes on real endpoints, a grace period
//! above `shutdown_grace_ms` plus the preStop pause, no Secret with a placeholder, seccomp,
//! no `trusted_networks` wider than the apps' CIDR, ...): `tools/check_deploy.py` checks them;
//! here it runs on the shipped files, and on copies broken in one place each, which it must
//! refuse. Among them: every variant runs the image set in one place (`kubernetes/image/`),
//! on the shipped files and with another image set there, and every image names one version;
//! the hold variant's pods each have a name of their own, and the Service taking mail lets one
//! go by a label (docs/hold.md's procedure to empty one pod's spool); the hold-s3 variant keeps
//! nothing in its pods (its autoscaler, no volume), its IAM policy allows exactly the spool's
//! calls on its prefix and queue, its queue outlives `max_hold_ms` without a redrive policy and
//! its bucket expires the prefix only after that (its `mailsluice check` runs against moto).
//! `.ci/kube-play` runs the manifests themselves under `podman kube play`.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::host::{have_programs, scratch_path, skip};
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

/// python3 with PyYAML, and kubectl (its kustomize renders the manifests); without them the
/// test is skipped (`support::host::skip`).
fn have_python_yaml() -> bool {
    if !have_programs(&["python3", "kubectl"], "python3 python3-yaml kubectl") {
        return false;
    }
    let found = (Command::new("python3").args(["-c", "import yaml"]).output())
        .is_ok_and(|o| o.status.success());
    if !found {
        skip("python3 has no yaml module (apt-get install python3-yaml)");
    }
    found
}

/// Copies the folder `from` into `to`, `edit` given each file's path (relative to `deploy/`)
/// and text.
fn copy_tree(from: &Path, to: &Path, rel: &Path, edit: &dyn Fn(&Path, String) -> String) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let (path, name) = (entry.path(), entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &to.join(&name), &rel.join(&name), edit);
        } else {
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(to.join(&name), edit(&rel.join(&name), text)).unwrap();
        }
    }
}

/// A copy of `deploy/` with `from` replaced by `to` in `file` (which must hold it).
fn broken_copy(file: &str, from: &str, to: &str) -> std::path::PathBuf {
    let dir = scratch_path("deploy");
    let edit = |path: &Path, text: String| match path == Path::new(file) {
        true => {
            assert!(text.contains(from), "{file} holds {from:?}");
            text.replace(from, to)
        }
        false => text,
    };
    copy_tree(Path::new("deploy"), &dir, Path::new(""), &edit);
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
        "ok: eks ConfigMap: `mailsluice check` passes",
        "ok: kubernetes: terminationGracePeriodSeconds (30 s) above shutdown_grace_ms (20000 ms) plus preStop (5 s)",
        "ok: eks: terminationGracePeriodSeconds (45 s) above shutdown_grace_ms (20000 ms) plus preStop (20 s)",
        "ok: eks: a Service sending PROXY protocol if and only if proxy_from is set",
        "ok: hold: mailsluice/mailsluice runs the image kubernetes/image/ sets (mailsluice:0.1.0, set: mailsluice:0.1.0)",
        "ok: hold: with another image set in kubernetes/image/, the relay runs it (registry.example.com/check-deploy/mailsluice:9.9.9)",
        "ok: eks: with another image set in kubernetes/image/, the relay runs it",
        "ok: hold: the StatefulSet's serviceName mailsluice-pods is a headless Service selecting every pod of the set",
        "ok: hold: docs/hold.md reaches a pod by its name as the manifests make it (mailsluice-1.mailsluice-pods.mailsluice.svc)",
        "ok: hold-s3 ConfigMap: `mailsluice check` passes",
        "ok: hold-s3: no PersistentVolumeClaim nor any volume for the spool",
        "ok: hold-s3: an HPA of at least 2 replicas",
        "ok: hold-s3: the IAM policy allows exactly s3:PutObject, s3:GetObject, s3:DeleteObject, s3:ListBucket, sqs:SendMessage, sqs:ReceiveMessage, sqs:DeleteMessage, sqs:ChangeMessageVisibility, sqs:GetQueueAttributes",
        "ok: hold-s3: the queue keeps an entry 1209600 s, past max_hold_ms (432000000 ms)",
        "ok: hold-s3: with another image set in kubernetes/image/, the relay runs it",
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
    let secret = "role/mailsluice-ses\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  \
                  name: mailsluice-ses\nstringData:\n  AWS_SECRET_ACCESS_KEY: replace-me\n";
    let cases = [
        (
            "kubernetes/mailsluice.yaml",
            "terminationGracePeriodSeconds: 30",
            "terminationGracePeriodSeconds: 25",
            "terminationGracePeriodSeconds (25 s) above shutdown_grace_ms (20000 ms) plus preStop (5 s)",
        ),
        (
            "kubernetes/nlb/kustomization.yaml",
            "value: 45",
            "value: 40",
            "eks: terminationGracePeriodSeconds (40 s) above",
        ),
        (
            "kubernetes/mailsluice.toml",
            "interval_ms = 1000\nstore",
            "interval_ms = 0\nstore",
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
        (
            "kubernetes/mailsluice.toml",
            "trusted_networks = [\"10.244.128.0/24\"]",
            "trusted_networks = [\"10.0.0.0/8\"]",
            "trusted_networks 10.0.0.0/8 lies within",
        ),
        (
            "kubernetes/serviceaccount.yaml",
            "role/mailsluice-ses\n",
            secret,
            "Secret mailsluice-ses holds no placeholder",
        ),
        (
            "kubernetes/mailsluice.yaml",
            "runAsGroup: 10001\n        seccompProfile: { type: RuntimeDefault }",
            "runAsGroup: 10001",
            "mailsluice has seccompProfile RuntimeDefault",
        ),
        (
            "kubernetes/mailsluice.yaml",
            "path: /readyz",
            "path: /ready",
            "readinessProbe on /readyz",
        ),
        (
            "kubernetes/hold/statefulset.yaml",
            "whenScaled: Retain",
            "whenScaled: Delete",
            "hold: the spools' volumes are kept when the set scales down or goes",
        ),
        (
            "kubernetes/hold/statefulset.yaml",
            "- { name: spool, mountPath: /var/spool/mailsluice }",
            "- { name: spool, mountPath: /var/spool/other }",
            "hold: the spool /var/spool/mailsluice is on the pod's own PersistentVolumeClaim",
        ),
        (
            "kubernetes/hold/kustomization.yaml",
            "  - target: { kind: HorizontalPodAutoscaler, name: mailsluice }",
            "  - target: { kind: HorizontalPodAutoscaler, name: nothing }",
            "hold: a fixed count of at least 2, no autoscaler",
        ),
        (
            "kubernetes/mailsluice.yaml",
            "/etc/mailsluice/mailsluice.toml",
            "/etc/mailsluice/relay.toml",
            "has the key relay.toml the relay reads",
        ),
        (
            "kubernetes/mailsluice.yaml",
            "targetPort: admin",
            "targetPort: metrics",
            "Service mailsluice port metrics exists",
        ),
        (
            "kubernetes/redis.yaml",
            "requirepass $REDIS_PASSWORD",
            "maxmemory 64mb",
            "Redis asks for the relay's password",
        ),
        (
            "kubernetes/nlb/mailsluice.toml",
            "proxy_from = [",
            "# proxy_from = [",
            "eks: a Service sending PROXY protocol if and only if proxy_from is set",
        ),
        (
            "kubernetes/hpa.yaml",
            "periodSeconds: 60",
            "periodSeconds: 10",
            "the HPA scales down one pod per 30 s or more",
        ),
        (
            "VALUES.md",
            "| `kubernetes/serviceaccount.yaml` |",
            "| the service account |",
            "VALUES.md: every file holding arn:aws:iam::123456789012:role/mailsluice-ses is listed",
        ),
        (
            "compose.yaml",
            "spool-3:/var/lib/mailsluice/spool",
            "spool-2:/var/lib/mailsluice/spool",
            "compose: each relay's spool on a named volume of its own",
        ),
        // A variant that does not apply the image component last renders `mailsluice`, no tag.
        (
            "hold/kustomization.yaml",
            "  - ../kubernetes/image\n",
            "",
            "hold: mailsluice/mailsluice's image mailsluice names one version",
        ),
        (
            "kubernetes/hold/statefulset.yaml",
            "image: mailsluice\n",
            "image: registry.example.com/other/mailsluice:0.1.0\n",
            "hold: mailsluice/mailsluice runs the image kubernetes/image/ sets",
        ),
        (
            "kubernetes/redis.yaml",
            "redis:7.4.2",
            "redis:7",
            "kubernetes: redis/redis's image docker.io/library/redis:7 names one version",
        ),
        (
            "compose.yaml",
            "redis:7.4.2",
            "redis:latest",
            "compose: redis's image docker.io/library/redis:latest names one version",
        ),
        (
            "kubernetes/hold/service.yaml",
            "  clusterIP: None\n",
            "",
            "hold: the StatefulSet's serviceName mailsluice-pods is a headless Service",
        ),
        (
            "kubernetes/hold/kustomization.yaml",
            "selector: { app.kubernetes.io/name: mailsluice, mailsluice.io/serving: \"true\" }",
            "selector: { app.kubernetes.io/name: mailsluice }",
            "hold: Service mailsluice selects a label the StatefulSet does not",
        ),
        // The spool on S3 and SQS: the pods keep nothing, and the AWS side fits the config.
        (
            "hold-s3/kustomization.yaml",
            "  - ../kubernetes/hold-s3\n",
            "  - ../kubernetes/hold\n  - ../kubernetes/hold-s3\n",
            "hold-s3: a StatefulSet if and only if the config has a [spool] on disk",
        ),
        (
            "kubernetes/hold-s3/kustomization.yaml",
            "patches:\n",
            "patches:\n  - target: { kind: Deployment, name: mailsluice }\n    patch: |\n      \
             - { op: add, path: /spec/template/spec/volumes/-, value: { name: spool, emptyDir: {} } }\n",
            "hold-s3: no PersistentVolumeClaim nor any volume for the spool",
        ),
        (
            "kubernetes/hold-s3/kustomization.yaml",
            "patches:\n",
            "patches:\n  - target: { kind: HorizontalPodAutoscaler, name: mailsluice }\n    \
             patch: |\n      $patch: delete\n      apiVersion: autoscaling/v2\n      \
             kind: HorizontalPodAutoscaler\n      metadata: { name: mailsluice }\n",
            "hold-s3: an autoscaler",
        ),
        (
            "hold-s3/aws/spool-policy.json",
            r#""s3:DeleteObject"]"#,
            r#""s3:DeleteObject", "s3:PutObjectAcl"]"#,
            "hold-s3: the IAM policy allows exactly",
        ),
        (
            "hold-s3/aws/spool-policy.json",
            r#"123456789012/mailsluice/*""#,
            r#"123456789012/*""#,
            "hold-s3: the IAM policy's s3:PutObject, s3:GetObject, s3:DeleteObject on \
             mailsluice-held-123456789012/mailsluice/* only",
        ),
        (
            "hold-s3/aws/spool-policy.json",
            ",\n      \"Condition\": { \"StringLike\": { \"s3:prefix\": \"mailsluice/*\" } }",
            "",
            "hold-s3: the IAM policy lists bucket mailsluice-held-123456789012 only under mailsluice/",
        ),
        (
            "hold-s3/aws/spool-stack.yaml",
            "MessageRetentionPeriod: 1209600",
            "MessageRetentionPeriod: 345600",
            "hold-s3: the queue keeps an entry 345600 s, past max_hold_ms",
        ),
        (
            "hold-s3/aws/spool-stack.yaml",
            "      SqsManagedSseEnabled: true\n",
            "      SqsManagedSseEnabled: true\n      \
             RedrivePolicy: { deadLetterTargetArn: arn, maxReceiveCount: 5 }\n",
            "hold-s3: the queue has no redrive policy",
        ),
        (
            "hold-s3/aws/spool-stack.yaml",
            "VisibilityTimeout: 60",
            "VisibilityTimeout: 30",
            "hold-s3: the queue's visibility timeout is visibility_ms",
        ),
        (
            "hold-s3/aws/spool-stack.yaml",
            "ExpirationInDays: 16",
            "ExpirationInDays: 7",
            "hold-s3: the bucket expires what lies under mailsluice/",
        ),
        (
            "VALUES.md",
            ", `hold-s3/aws/spool-policy.json` (its ARN)",
            "",
            "VALUES.md: every file holding mailsluice-held-123456789012 is listed",
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
