#!/usr/bin/env python3
"""Checks the deployment files without a cluster: they parse, their relay configs pass
`mailsluice check`, and the Kubernetes manifests hold what they promise.

    python3 tools/check_deploy.py --mailsluice PATH [--deploy DIR]

DIR (default: deploy/) holds compose.yaml and kubernetes/*.yaml. Prints one line per check and
exits 1 at the first that fails, naming it. Needs PyYAML (Debian: python3-yaml).
"""

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

import yaml


class Failed(Exception):
    pass


def need(ok, what):
    if not ok:
        raise Failed(what)
    print(f"check_deploy: ok: {what}")


def mailsluice_check(binary, config, where):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(config)
        path = f.name
    try:
        run = subprocess.run([binary, "check", "--config", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    need(run.returncode == 0, f"{where}: `mailsluice check` passes ({run.stdout}{run.stderr}".strip() + ")")


def grace_ms(config):
    m = re.search(r"^\s*shutdown_grace_ms\s*=\s*(\d+)", config, re.M)
    return int(m.group(1)) if m else 30000


def check_compose(path, binary):
    with open(path, encoding="utf-8") as f:
        compose = yaml.safe_load(f)
    relay = compose["services"]["mailsluice"]
    need(relay["deploy"]["replicas"] == 3, "compose: 3 relay replicas")
    need("redis" in compose["services"], "compose: a Redis service")
    config = compose["configs"]["mailsluice"]["content"]
    need('store = "redis"' in config, "compose: a layer on Redis")
    mailsluice_check(binary, config, "compose")


def kube_objects(folder):
    objects = []
    for path in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
        if os.path.basename(path) == "kustomization.yaml":
            continue
        with open(path, encoding="utf-8") as f:
            objects += [o for o in yaml.safe_load_all(f) if o]
    return objects


def check_kubernetes(folder, binary):
    objects = kube_objects(folder)
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    with open(os.path.join(folder, "kustomization.yaml"), encoding="utf-8") as f:
        listed = set(yaml.safe_load(f)["resources"])
    files = {os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.yaml"))}
    need(listed == files - {"kustomization.yaml"}, "kubernetes: kustomization lists every file")

    (deployment,) = by_kind["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    (relay,) = spec["containers"]
    need(deployment["spec"]["replicas"] == 2, "kubernetes: the relay has 2 replicas")
    need(relay["livenessProbe"]["httpGet"]["path"] == "/healthz", "kubernetes: liveness on /healthz")
    need(relay["readinessProbe"]["httpGet"]["path"] == "/readyz", "kubernetes: readiness on /readyz")
    need({"requests", "limits"} <= set(relay["resources"]), "kubernetes: resources set")
    need(spec["securityContext"]["runAsNonRoot"] is True, "kubernetes: non-root")
    need(relay["securityContext"]["readOnlyRootFilesystem"] is True, "kubernetes: read-only root filesystem")

    (configmap,) = [c for c in by_kind["ConfigMap"] if c["metadata"]["name"] == "mailsluice"]
    config = configmap["data"]["mailsluice.toml"]
    grace_s = spec["terminationGracePeriodSeconds"]
    need(
        grace_s * 1000 > grace_ms(config),
        f"kubernetes: terminationGracePeriodSeconds ({grace_s} s) above shutdown_grace_ms ({grace_ms(config)} ms)",
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = [m for m in relay["volumeMounts"] if volumes[m["name"]].get("configMap", {}).get("name") == "mailsluice"]
    need(
        any(m["mountPath"] + "/mailsluice.toml" in relay["args"] for m in mounts),
        "kubernetes: the relay reads the ConfigMap's config",
    )
    mailsluice_check(binary, config, "kubernetes ConfigMap")

    (pdb,) = by_kind["PodDisruptionBudget"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    need(pdb["spec"]["selector"]["matchLabels"].items() <= labels.items(), "kubernetes: the PDB selects the relay")
    services = {s["metadata"]["name"]: s for s in by_kind["Service"]}
    need(services["mailsluice"]["spec"]["selector"].items() <= labels.items(), "kubernetes: the Service selects the relay")
    (account,) = by_kind["ServiceAccount"]
    need(
        "eks.amazonaws.com/role-arn" in account["metadata"].get("annotations", {})
        and spec["serviceAccountName"] == account["metadata"]["name"],
        "kubernetes: the relay runs as a service account with an IRSA role",
    )
    (redis,) = by_kind["StatefulSet"]
    redis_labels = redis["spec"]["template"]["metadata"]["labels"]
    need(services["redis"]["spec"]["selector"].items() <= redis_labels.items(), "kubernetes: the redis Service selects Redis")
    need("redis://redis:6379" in config, "kubernetes: the relay's config names the redis Service")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = argparse.ArgumentParser()
    args.add_argument("--mailsluice", required=True)
    args.add_argument("--deploy", default=os.path.join(here, "..", "deploy"))
    a = args.parse_args()
    try:
        check_compose(os.path.join(a.deploy, "compose.yaml"), a.mailsluice)
        check_kubernetes(os.path.join(a.deploy, "kubernetes"), a.mailsluice)
    except (Failed, KeyError, ValueError, TypeError, yaml.YAMLError) as e:
        print(f"check_deploy: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print("check_deploy: all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
