#!/usr/bin/env python3
"""Checks the deployment files without a cluster: they parse, their relay configs pass
`mailsluice check`, and the Kubernetes manifests, rendered by kustomize as `kubectl apply -k`
would, hold what they promise.

    python3 tools/check_deploy.py --mailsluice PATH [--deploy DIR] [--kubectl PATH]

DIR (default: deploy/) holds compose.yaml, kubernetes/ (the base, with its components nlb/,
monitoring/, hold/, hold-s3/ and image/), eks/ (the base with nlb/ and monitoring/), hold/ (the
base in hold mode, a spool on each pod's volume) and hold-s3/ (the base in hold mode with the
spool on S3 and SQS, and in hold-s3/aws/ the queue's and bucket's template and the pods' IAM
policy). Prints one line per check and exits 1 at the first that fails, naming it.

The image: every workload's image carries a tag (or a digest), and every relay workload of every
variant runs the image kubernetes/image/ sets, the one place to set it; on a copy of DIR with
another image set there (the edit `kustomize edit set image` makes), every variant renders that
one. The hold variant's pods each have a DNS name of their own (a headless Service named as the
StatefulSet's serviceName), and the Service taking mail selects a label the set does not, so a pod
relabelled out of it (docs/hold.md, "Emptying one pod's spool") stays the set's, reachable by
the name that page uses. The hold-s3 variant keeps nothing in its pods (a Deployment with its
autoscaler, no volume), and its AWS side matches its config: the IAM policy allows exactly the
calls the spool makes, on the bucket's prefix and the queue only; the queue keeps an entry past
max_hold_ms and has no redrive policy; the bucket expires the prefix only after that. Its
config's `mailsluice check` runs against moto's S3 and SQS (`moto_server`, with boto3 to make
the bucket and the queue there). Needs PyYAML (Debian: python3-yaml) and kubectl (its built-in
kustomize renders the manifests).
"""

import argparse
import glob
import importlib.util
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib

import yaml

# What the admin endpoint answers a GET on without asking for a password (src/admin/endpoint.rs).
PROBE_PATHS = {"/healthz", "/readyz"}
# A value a Secret must never be shipped with.
PLACEHOLDER = re.compile(r"replace|change|example|placeholder|todo|xxx|secret|password|^\.*$|^<.*>$", re.I)
# The pages the checks hold the manifests to (the repository's, whichever DIR is checked).
DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")
# The kustomizations of DIR an operator applies.
VARIANTS = ("kubernetes", "eks", "hold", "hold-s3")
# Broader than this, a network is no apps' CIDR.
WIDEST = {4: 16, 6: 48}
# The calls of the spool on S3 and SQS (docs/spool-s3.md, "On Kubernetes"), and no others: CopyObject
# (to failed/, damaged/, back to held/) is a GetObject of its source and a PutObject of its
# copy, a ranged read a GetObject, and each batch call is allowed by its single action.
SPOOL_ACTIONS = [
    "s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:ListBucket",
    "sqs:SendMessage", "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
    "sqs:GetQueueAttributes",
]
# [spool]'s defaults (docs/configuration.md) the AWS side is checked against.
SPOOL_DEFAULTS = {"prefix": "mailsluice/", "max_hold_ms": 432000000, "retry_max_ms": 3600000, "visibility_ms": 60000}


class Failed(Exception):
    pass


def need(ok, what):
    if not ok:
        raise Failed(what)
    print(f"check_deploy: ok: {what}")


def skip_or_fail(why):
    """As the tests' `support::host::skip`: a failure under CI, a skip only when
    MAILSLUICE_ALLOW_SKIP=1 allows it."""
    if os.environ.get("CI") != "true" and os.environ.get("MAILSLUICE_ALLOW_SKIP") == "1":
        print(f"check_deploy: SKIPPED: {why}")
        return True
    raise Failed(f"{why} (MAILSLUICE_ALLOW_SKIP=1 skips it outside CI)")


class MotoStandIn:
    """moto's server on a free port of 127.0.0.1, holding the bucket and the queue a `store =
    "s3"` config names: `check` writes its probe there as it would in AWS."""

    def __init__(self, spool):
        import boto3
        from botocore.config import Config

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.close()
                    raise Failed(f"moto_server did not answer on port {port}")
                time.sleep(0.1)
        region = spool["region"]
        keys = {"aws_access_key_id": "check-deploy", "aws_secret_access_key": "check-deploy", "region_name": region, "endpoint_url": self.url}
        try:
            s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}), **keys)
            place = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
            s3.create_bucket(Bucket=spool["bucket"], **place)
            name = spool["queue_url"].rstrip("/").rsplit("/", 1)[1]
            self.queue_url = boto3.client("sqs", **keys).create_queue(QueueName=name)["QueueUrl"]
        except Exception:
            self.close()
            raise

    def config(self, text):
        """`text` with its [spool] pointed at moto: queue_url moto's, endpoint_url set."""
        text = re.sub(r'^queue_url = "[^"]*"', f'queue_url = "{self.queue_url}"', text, flags=re.M)
        text = re.sub(r'^endpoint_url = "[^"]*"\n', "", text, flags=re.M)
        return re.sub(r"^\[spool\]\n", f'[spool]\nendpoint_url = "{self.url}"\n', text, flags=re.M)

    def close(self):
        self.process.kill()
        self.process.wait()


def mailsluice_check(binary, config, where):
    """`mailsluice check` on `config`, its `*_env` variables set as the pod's Secrets would. A
    `[spool]` on disk is put in a scratch directory: `check` opens it as the start does (making
    it). A spool on S3 and SQS is put on moto's server (`MotoStandIn`), with credentials for it
    in the environment: `check` writes its probe there."""
    spool = tempfile.mkdtemp(prefix="check-deploy-spool-")
    config = re.sub(r'^dir = "[^"]*"', f'dir = "{spool}/spool"', config, flags=re.M)
    env = dict(os.environ)
    stand_in = None
    s3_spool = tomllib.loads(config).get("spool", {})
    if s3_spool.get("store") == "s3":
        shutil.rmtree(spool, ignore_errors=True)
        if shutil.which("moto_server") is None or importlib.util.find_spec("boto3") is None:
            if skip_or_fail(f"{where}: `mailsluice check` of a spool on S3 and SQS needs moto_server and boto3 (pip install \"moto[server]\")"):
                return
        stand_in = MotoStandIn(s3_spool)
        config = stand_in.config(config)
        for var in ("AWS_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_SESSION_TOKEN"):
            env.pop(var, None)
        env.update(AWS_ACCESS_KEY_ID="check-deploy", AWS_SECRET_ACCESS_KEY="check-deploy", AWS_EC2_METADATA_DISABLED="true")
    for key, var in re.findall(r"^\s*(\w+_env)\s*=\s*\"([^\"]+)\"", config, re.M):
        if key == "password_hash_env":
            hashed = subprocess.run([binary, "hash-password"], input="check-deploy\n", capture_output=True, text=True)
            env[var] = hashed.stdout.strip()
        else:
            env[var] = "check-deploy"
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(config)
        path = f.name
    try:
        run = subprocess.run([binary, "check", "--config", path], capture_output=True, text=True, env=env)
    finally:
        os.unlink(path)
        shutil.rmtree(spool, ignore_errors=True)
        if stand_in:
            stand_in.close()
    need(run.returncode == 0, f"{where}: `mailsluice check` passes ({run.stdout}{run.stderr}".strip() + ")")


def grace_ms(config):
    return tomllib.loads(config)["smtp"].get("shutdown_grace_ms", 30000)


def check_compose(path, binary):
    with open(path, encoding="utf-8") as f:
        compose = yaml.safe_load(f)
    relays = [service for name, service in compose["services"].items() if name.startswith("mailsluice")]
    need(len(relays) == 3, "compose: 3 relays")
    need(all(not relay["image"].startswith("localhost/") for relay in relays), "compose: an image name Docker and podman both resolve")
    for name, service in compose["services"].items():
        need(tagged(service["image"]), f"compose: {name}'s image {service['image']} names one version (a whole version's tag, or a digest)")
    need("redis" in compose["services"], "compose: a Redis service")
    config = compose["configs"]["mailsluice"]["content"]
    need('store = "redis"' in config, "compose: a layer on Redis")
    parsed = tomllib.loads(config)
    need("admin" in parsed, "compose: [admin] on (the status page shows each relay's spool)")
    if "spool" in parsed:
        # A named volume of its own for each relay's spool: kept across `down` and `up`, never
        # two relays on one directory.
        spools = [v.split(":")[0] for relay in relays for v in relay["volumes"] if v.split(":")[1:2] == [parsed["spool"]["dir"]]]
        need(len(spools) == len(relays) and len(set(spools)) == len(spools) and set(spools) <= set(compose.get("volumes") or {}), f"compose: each relay's spool on a named volume of its own ({', '.join(spools)})")
    mailsluice_check(binary, config, "compose")


def check_listed(folder, where):
    """Every file of a kustomization's folder is used by it: no manifest left out by mistake."""
    with open(os.path.join(folder, "kustomization.yaml"), encoding="utf-8") as f:
        k = yaml.safe_load(f)
    used = set(k.get("resources", []))
    for generator in k.get("configMapGenerator", []) + k.get("secretGenerator", []):
        used |= set(generator.get("files", []))
    files = {os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.yaml")) + glob.glob(os.path.join(folder, "*.toml"))}
    need(files - {"kustomization.yaml"} <= used, f"{where}: the kustomization uses every file")


def render(kubectl, folder):
    run = subprocess.run([kubectl, "kustomize", folder], capture_output=True, text=True)
    need(run.returncode == 0, f"kustomize renders {os.path.normpath(folder)}" + (f" ({run.stderr.strip()[-300:]})" if run.returncode else ""))
    return [o for o in yaml.safe_load_all(run.stdout) if o]


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def named(objects, kind, name):
    found = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return found[0] if found else None


def selects(selector, labels):
    return bool(selector) and selector.items() <= labels.items()


def prestop_seconds(container):
    pre = container.get("lifecycle", {}).get("preStop", {})
    if "sleep" in pre:
        return int(pre["sleep"]["seconds"])
    command = pre.get("exec", {}).get("command", [])
    if command and command[0].endswith("sleep"):
        return int(command[1])
    return 0


def port_number(container, port):
    """A probe's or Service's port (a name or a number) as the container's port number, or None."""
    for p in container.get("ports", []):
        if port in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def secret_env(container, var):
    """The (Secret, key) that sets `var` in `container`, or None."""
    for e in container.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if e["name"] == var and ref:
            return ref["name"], ref["key"]
    return None


def networks(values):
    return [ipaddress.ip_network(v, strict=False) for v in values]


def check_render(objects, binary, where):
    # No Secret is shipped with a value someone must remember to change.
    for secret in by_kind(objects, "Secret"):
        values = list(secret.get("stringData", {}).values()) + list(secret.get("data", {}).values())
        need(not any(PLACEHOLDER.search(str(v)) for v in values), f"{where}: Secret {secret['metadata']['name']} holds no placeholder")
    (namespace,) = by_kind(objects, "Namespace")
    ns = namespace["metadata"]["name"]
    need(namespace["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") == "restricted", f"{where}: the namespace enforces the restricted Pod Security level")
    need(all(o["metadata"].get("namespace") == ns for o in objects if o["kind"] != "Namespace"), f"{where}: every object is in namespace {ns}")

    # The relay: a Deployment, or with a spool (hold mode) a StatefulSet, each pod on its own volume.
    deployment = named(objects, "Deployment", "mailsluice")
    stateful = named(objects, "StatefulSet", "mailsluice")
    need((deployment is None) != (stateful is None), f"{where}: the relay runs as one Deployment or one StatefulSet")
    workload = deployment or stateful
    pod = workload["spec"]["template"]["spec"]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    (relay,) = pod["containers"]
    need(not relay["image"].startswith("localhost/"), f"{where}: an image name Docker and podman both resolve ({relay['image']})")
    if deployment:
        need("replicas" not in deployment["spec"], f"{where}: the HPA, not the Deployment, sets the replicas")
        strategy = deployment["spec"]["strategy"]["rollingUpdate"]
        need(strategy["maxUnavailable"] == 0, f"{where}: a rollout starts a new pod before it stops an old one")

    # The config: the ConfigMap the relay mounts, with the key it reads.
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_path = relay["args"][relay["args"].index("--config") + 1]
    mount = next(m for m in relay["volumeMounts"] if config_path.startswith(m["mountPath"] + "/"))
    cm_name = volumes[mount["name"]]["configMap"]["name"]
    configmap = named(objects, "ConfigMap", cm_name)
    need(configmap is not None, f"{where}: the relay's ConfigMap {cm_name} exists")
    key = config_path[len(mount["mountPath"]) + 1 :]
    need(key in configmap["data"], f"{where}: ConfigMap {cm_name} has the key {key} the relay reads")
    for c in pod["containers"]:
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("configMapKeyRef")
            if ref:
                cm = named(objects, "ConfigMap", ref["name"])
                need(cm is not None and ref["key"] in cm["data"], f"{where}: ConfigMap key {ref['name']}/{ref['key']} exists")
    config_text = configmap["data"][key]
    config = tomllib.loads(config_text)
    mailsluice_check(binary, config_text, f"{where} ConfigMap")

    # A spool on disk outlives its pod only on a volume of that pod's own: a StatefulSet's
    # claim, kept when the set scales down (its messages wait for the pod to come back). A spool
    # on S3 and SQS is every replica's: the pods keep nothing, and scale freely.
    spool = config.get("spool")
    on_disk = spool is not None and spool.get("store", "dir") == "dir"
    need(on_disk == (stateful is not None), f"{where}: a StatefulSet if and only if the config has a [spool] on disk")
    if spool and not on_disk:
        need(spool["store"] == "s3", f"{where}: [spool] store is \"dir\" or \"s3\"")
        kept = [v["name"] for v in pod["volumes"] if {"persistentVolumeClaim", "ephemeral", "emptyDir", "hostPath"} & set(v)]
        need(not by_kind(objects, "PersistentVolumeClaim") and not kept, f"{where}: no PersistentVolumeClaim nor any volume for the spool (store = \"s3\": the pods keep nothing)")
        need(len(by_kind(objects, "HorizontalPodAutoscaler")) == 1, f"{where}: an autoscaler (store = \"s3\": a scale-down strands no held mail)")
    if on_disk:
        claims = {c["metadata"]["name"] for c in stateful["spec"].get("volumeClaimTemplates", [])}
        holds = [m for m in relay["volumeMounts"] if (spool["dir"] + "/").startswith(m["mountPath"].rstrip("/") + "/")]
        need(len(holds) == 1 and holds[0]["name"] in claims and not holds[0].get("readOnly"), f"{where}: the spool {spool['dir']} is on the pod's own PersistentVolumeClaim")
        retention = stateful["spec"].get("persistentVolumeClaimRetentionPolicy", {})
        need(retention.get("whenScaled") == "Retain" and retention.get("whenDeleted") == "Retain", f"{where}: the spools' volumes are kept when the set scales down or goes")
        need(stateful["spec"].get("replicas", 1) >= 2 and not by_kind(objects, "HorizontalPodAutoscaler"), f"{where}: a fixed count of at least 2, no autoscaler (a scale-down strands a spool)")
        need(pod["securityContext"].get("fsGroup") is not None, f"{where}: the spool's volume is writable by the relay (fsGroup)")

    # Ports and probes: what the config listens on, the container declares, and the probes,
    # Services, NetworkPolicies and ServiceMonitors name.
    smtp_port = int(config["smtp"]["listen"][0].rsplit(":", 1)[1])
    admin_port = int(config["admin"]["listen"].rsplit(":", 1)[1])
    need(port_number(relay, "smtp") == smtp_port and port_number(relay, "admin") == admin_port, f"{where}: container ports smtp {smtp_port} and admin {admin_port} as the config listens")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = relay[probe]["httpGet"]
        need(get["path"] == path and get["path"] in PROBE_PATHS and port_number(relay, get["port"]) == admin_port, f"{where}: {probe} on {path} at the admin port")
    for service in by_kind(objects, "Service"):
        if selects(service["spec"]["selector"], labels):
            for p in service["spec"]["ports"]:
                need(port_number(relay, p["targetPort"]) is not None, f"{where}: Service {service['metadata']['name']} port {p['targetPort']} exists")
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    for monitor in by_kind(objects, "ServiceMonitor"):
        chosen = [s for s in services.values() if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"].get("labels", {}))]
        for endpoint in monitor["spec"]["endpoints"]:
            ok = chosen and all(any(p["name"] == endpoint["port"] for p in s["spec"]["ports"]) for s in chosen)
            need(ok and endpoint["path"] == "/metrics", f"{where}: ServiceMonitor scrapes /metrics on port {endpoint['port']}")

    # Stopping: the preStop pause, then the drain, within the grace period.
    grace_s = pod["terminationGracePeriodSeconds"]
    pause = prestop_seconds(relay)
    need(pause > 0, f"{where}: a preStop pause ({pause} s) before SIGTERM")
    drain = grace_ms(config_text)
    need(grace_s * 1000 > drain + pause * 1000, f"{where}: terminationGracePeriodSeconds ({grace_s} s) above shutdown_grace_ms ({drain} ms) plus preStop ({pause} s)")

    # Every pod: restricted, seccomp RuntimeDefault.
    for workload in by_kind(objects, "Deployment") + by_kind(objects, "StatefulSet"):
        spec = workload["spec"]["template"]["spec"]
        name = workload["metadata"]["name"]
        need(spec["securityContext"].get("runAsNonRoot") is True, f"{where}: {name} runs as non-root")
        need(spec["securityContext"].get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{where}: {name} has seccompProfile RuntimeDefault")
        for c in spec["containers"]:
            sc = c["securityContext"]
            need(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False and sc.get("capabilities", {}).get("drop") == ["ALL"], f"{where}: {name}/{c['name']}: read-only root filesystem, no privilege escalation, no capabilities")
            need({"requests", "limits"} <= set(c["resources"]), f"{where}: {name}/{c['name']}: resources set")
    spread = {t["topologyKey"] for t in pod.get("topologySpreadConstraints", [])}
    need({"topology.kubernetes.io/zone", "kubernetes.io/hostname"} <= spread, f"{where}: the relay spreads over zones and nodes")

    # Secrets: the admin password's hash and Redis's password come from them.
    var = config["admin"].get("password_hash_env")
    need(config["admin"].get("password_hash") or (var and secret_env(relay, var)), f"{where}: the admin password's hash comes from a Secret")
    redis_cfg = config["redis"]
    relay_redis = secret_env(relay, redis_cfg.get("password_env", ""))
    need(relay_redis is not None, f"{where}: the relay's Redis password comes from a Secret")
    redis = named(objects, "StatefulSet", "redis")
    (server,) = redis["spec"]["template"]["spec"]["containers"]
    command = " ".join(server.get("command", []) + server.get("args", []))
    need("requirepass $REDIS_PASSWORD" in command and secret_env(server, "REDIS_PASSWORD") == relay_redis, f"{where}: Redis asks for the relay's password (requirepass)")
    need("protected-mode no" not in command, f"{where}: Redis keeps protected mode")
    need(selects(services["redis"]["spec"]["selector"], redis["spec"]["template"]["metadata"]["labels"]), f"{where}: the redis Service selects Redis")
    need(redis_cfg["url"].startswith("redis://redis:6379"), f"{where}: the relay's config names the redis Service")

    # NetworkPolicies: a default deny; SMTP, admin and Redis each from whom they serve.
    policies = by_kind(objects, "NetworkPolicy")
    need(any(p["spec"]["podSelector"] == {} and not p["spec"].get("ingress") for p in policies), f"{where}: ingress denied by default")
    def admitting(pod_labels, port_names):
        for p in policies:
            if selects(p["spec"]["podSelector"].get("matchLabels", {}), pod_labels):
                for rule in p["spec"].get("ingress", []):
                    if any(port.get("port") in port_names for port in rule.get("ports", [])):
                        yield rule
    smtp_rules = list(admitting(labels, {"smtp", smtp_port}))
    admin_rules = list(admitting(labels, {"admin", admin_port}))
    redis_rules = list(admitting(redis["spec"]["template"]["metadata"]["labels"], {6379, "redis"}))
    need(smtp_rules and all(r.get("from") for r in smtp_rules), f"{where}: SMTP only from the apps")
    need(admin_rules and all(f.get("namespaceSelector") for r in admin_rules for f in r.get("from", [None])), f"{where}: admin only from the monitoring namespace")
    need(redis_rules and all(selects(f.get("podSelector", {}).get("matchLabels", {}), labels) for r in redis_rules for f in r.get("from", [{}])), f"{where}: Redis only from the relay")
    for p in policies:
        if selects(p["spec"]["podSelector"].get("matchLabels", {}), labels):
            for pp in (pp for rule in p["spec"].get("ingress", []) for pp in rule.get("ports", [])):
                need(port_number(relay, pp["port"]) is not None, f"{where}: NetworkPolicy {p['metadata']['name']} port {pp['port']} exists")

    # trusted_networks (and proxy_from) no wider than the apps' CIDR: inside an ipBlock that
    # may reach SMTP, itself no wider than /16 (/48).
    blocks = networks(f["ipBlock"]["cidr"] for r in smtp_rules for f in r["from"] if "ipBlock" in f)
    for net in blocks:
        need(net.prefixlen >= WIDEST[net.version], f"{where}: the CIDR {net} let reach SMTP is no wider than /{WIDEST[net.version]}")
    for key in ("trusted_networks", "proxy_from"):
        for net in networks(config["smtp"].get(key, [])):
            inside = any(net.version == b.version and net.subnet_of(b) for b in blocks)
            need(inside, f"{where}: {key} {net} lies within a CIDR the NetworkPolicies let reach SMTP ({', '.join(map(str, blocks))})")

    # A balancer that sends PROXY, and a relay that reads it: both or neither.
    proxied = [s for s in services.values() if "proxy-protocol" in " ".join(s["metadata"].get("annotations", {}))]
    need(bool(proxied) == bool(config["smtp"].get("proxy_from")), f"{where}: a Service sending PROXY protocol if and only if proxy_from is set")

    # Scaling: an HPA for the Deployment whose scale-down lets each pod drain before the next.
    if deployment:
        (hpa,) = by_kind(objects, "HorizontalPodAutoscaler")
        target = hpa["spec"]["scaleTargetRef"]
        need(target["kind"] == "Deployment" and target["name"] == "mailsluice" and hpa["spec"]["minReplicas"] >= 2, f"{where}: an HPA of at least 2 replicas")
        down = hpa["spec"]["behavior"]["scaleDown"]
        need(all(p["type"] == "Pods" and p["value"] == 1 and p["periodSeconds"] >= grace_s for p in down["policies"]) and down.get("selectPolicy") == "Min", f"{where}: the HPA scales down one pod per {grace_s} s or more (a drain's length)")
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    need(selects(pdb["spec"]["selector"]["matchLabels"], labels), f"{where}: the PDB selects the relay")
    (account,) = by_kind(objects, "ServiceAccount")
    need("eks.amazonaws.com/role-arn" in account["metadata"].get("annotations", {}) and pod["serviceAccountName"] == account["metadata"]["name"], f"{where}: the relay runs as a service account with an IRSA role")
    return config


def as_list(value):
    return value if isinstance(value, list) else [value]


def queue_arn(url):
    """The ARN of the queue at `url` (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)."""
    m = re.fullmatch(r"https://sqs\.([a-z0-9-]+)\.amazonaws\.com/(\d{12})/([\w-]+)", url)
    need(m is not None, f"the queue_url {url} is an SQS queue's URL")
    return f"arn:aws:sqs:{m[1]}:{m[2]}:{m[3]}"


def check_spool_policy(path, spool, where):
    """The pods' IAM policy: the spool's calls, and only on the bucket's prefix and the queue."""
    with open(path, encoding="utf-8") as f:
        statements = json.load(f)["Statement"]
    actions = [a for s in statements for a in as_list(s["Action"])]
    beyond, missing = sorted(set(actions) - set(SPOOL_ACTIONS)), sorted(set(SPOOL_ACTIONS) - set(actions))
    differs = f" (beyond them: {', '.join(beyond) or 'none'}; missing: {', '.join(missing) or 'none'})" if beyond or missing else ""
    exact = all(s["Effect"] == "Allow" for s in statements) and sorted(actions) == sorted(SPOOL_ACTIONS)
    need(exact, f"{where}: the IAM policy allows exactly {', '.join(SPOOL_ACTIONS)}{differs}")
    bucket, prefix, queue = spool["bucket"], spool.get("prefix", SPOOL_DEFAULTS["prefix"]), queue_arn(spool["queue_url"])
    for s in statements:
        resources, acts = as_list(s["Resource"]), as_list(s["Action"])
        if acts == ["s3:ListBucket"]:
            ok = resources == [f"arn:aws:s3:::{bucket}"] and s.get("Condition") == {"StringLike": {"s3:prefix": f"{prefix}*"}}
            need(ok, f"{where}: the IAM policy lists bucket {bucket} only under {prefix} (s3:prefix)")
        elif all(a.startswith("s3:") and a != "s3:ListBucket" for a in acts):
            need(resources == [f"arn:aws:s3:::{bucket}/{prefix}*"] and "Condition" not in s, f"{where}: the IAM policy's {', '.join(acts)} on {bucket}/{prefix}* only")
        else:
            need(all(a.startswith("sqs:") for a in acts) and resources == [queue], f"{where}: the IAM policy's {', '.join(acts)} on the queue {queue} only")


def check_spool_stack(path, spool, where):
    """The queue's and the bucket's settings (a CloudFormation template) against the config."""
    with open(path, encoding="utf-8") as f:
        stack = yaml.safe_load(f)
    params = stack.get("Parameters", {})

    def value(v):
        return params[v["Ref"]].get("Default") if isinstance(v, dict) and "Ref" in v else v

    def resources(kind):
        return [r.get("Properties", {}) for r in stack["Resources"].values() if r["Type"] == kind]

    (queue,) = resources("AWS::SQS::Queue")
    name = spool["queue_url"].rstrip("/").rsplit("/", 1)[1]
    need(value(queue.get("QueueName")) == name and not queue.get("FifoQueue"), f"{where}: the template makes the standard queue {name} of queue_url")
    retention = int(queue.get("MessageRetentionPeriod", 345600))
    hold, retry = (spool.get(k, SPOOL_DEFAULTS[k]) for k in ("max_hold_ms", "retry_max_ms"))
    need(retention * 1000 >= hold + retry, f"{where}: the queue keeps an entry {retention} s, past max_hold_ms ({hold} ms) and a last retry_max_ms ({retry} ms)")
    need("RedrivePolicy" not in queue, f"{where}: the queue has no redrive policy (the relay gives up at max_hold_ms itself, with a report)")
    visibility = spool.get("visibility_ms", SPOOL_DEFAULTS["visibility_ms"])
    need(int(queue.get("VisibilityTimeout", 30)) * 1000 == visibility, f"{where}: the queue's visibility timeout is visibility_ms ({visibility} ms)")
    (bucket,) = resources("AWS::S3::Bucket")
    prefix = spool.get("prefix", SPOOL_DEFAULTS["prefix"])
    rules = [r for r in bucket.get("LifecycleConfiguration", {}).get("Rules", []) if r.get("Status") == "Enabled"]
    expiring = [r for r in rules if "ExpirationInDays" in r and prefix.startswith(value(r.get("Prefix", "")) or "")]
    need(expiring and all(int(r["ExpirationInDays"]) * 86400 > retention for r in expiring), f"{where}: the bucket expires what lies under {prefix} (orphans, failed/, damaged/), and only after the queue's retention ({retention} s)")
    blocked = bucket.get("PublicAccessBlockConfiguration", {})
    need(all(blocked.get(k) is True for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")), f"{where}: the bucket blocks public access")
    need(bool(bucket.get("BucketEncryption")) and queue.get("SqsManagedSseEnabled") is True, f"{where}: the bucket and the queue are encrypted at rest")


def workloads(objects):
    return by_kind(objects, "Deployment") + by_kind(objects, "StatefulSet")


def image_set(deploy):
    """The relay's image as kubernetes/image/ sets it: `name[:tag]` or `name@digest`."""
    with open(os.path.join(deploy, "kubernetes", "image", "kustomization.yaml"), encoding="utf-8") as f:
        (image,) = [i for i in yaml.safe_load(f)["images"] if i["name"] == "mailsluice"]
    name = image.get("newName", image["name"])
    if "digest" in image:
        return f"{name}@{image['digest']}"
    return f"{name}:{image['newTag']}" if "newTag" in image else name


def tagged(image):
    """Whether `image` names one version: a digest, or a tag of a whole version (`7.4.2`,
    `0.1.0-alpine`), not a floating `7`, `7.4` or `latest`."""
    if "@" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and re.match(r"\d+\.\d+\.\d+", last.rsplit(":", 1)[1]) is not None


def check_images(objects, want, where):
    for workload in workloads(objects):
        name = workload["metadata"]["name"]
        for c in workload["spec"]["template"]["spec"]["containers"]:
            need(tagged(c["image"]), f"{where}: {name}/{c['name']}'s image {c['image']} names one version (a whole version's tag, or a digest)")
            if name == "mailsluice":
                need(c["image"] == want, f"{where}: {name}/{c['name']} runs the image kubernetes/image/ sets ({c['image']}, set: {want})")


def check_pods_by_name(objects, where):
    """A StatefulSet's pods each reachable by name, and one of them out of the Service taking
    mail by a label the set does not select on, as docs/hold.md's procedure does."""
    for stateful in [s for s in by_kind(objects, "StatefulSet") if s["metadata"]["name"] == "mailsluice"]:
        labels = stateful["spec"]["template"]["metadata"]["labels"]
        own = stateful["spec"]["selector"]["matchLabels"]
        services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
        headless = services.get(stateful["spec"]["serviceName"])
        need(headless is not None and headless["spec"].get("clusterIP") == "None" and selects(headless["spec"]["selector"], own),
             f"{where}: the StatefulSet's serviceName {stateful['spec']['serviceName']} is a headless Service selecting every pod of the set")
        need(any(p["name"] == "admin" for p in headless["spec"]["ports"]), f"{where}: a pod's admin port reachable by its name")
        taking = [s for s in services.values() if s is not headless and selects(s["spec"]["selector"], labels)]
        for service in taking:
            apart = set(service["spec"]["selector"]) - set(own)
            need(apart, f"{where}: Service {service['metadata']['name']} selects a label the StatefulSet does not (a pod relabelled leaves it, not the set)")
        ns = stateful["metadata"]["namespace"]
        name = f"{stateful['metadata']['name']}-1.{headless['metadata']['name']}.{ns}.svc"
        with open(os.path.join(DOCS, "hold.md"), encoding="utf-8") as f:
            page = f.read()
        need(name in page, f"{where}: docs/hold.md reaches a pod by its name as the manifests make it ({name})")
        label = sorted(set(taking[0]["spec"]["selector"]) - set(own))[0] if taking else ""
        need(f"{label}=false" in page, f"{where}: docs/hold.md takes a pod out of the Service by its label {label}")


def check_image_set_once(deploy, kubectl):
    """On a copy, another image set in kubernetes/image/ only: every variant runs it."""
    want = "registry.example.com/check-deploy/mailsluice:9.9.9"
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "deploy")
        shutil.copytree(deploy, copy)
        path = os.path.join(copy, "kubernetes", "image", "kustomization.yaml")
        with open(path, encoding="utf-8") as f:
            k = yaml.safe_load(f)
        k["images"] = [{"name": "mailsluice", "newName": want.rsplit(":", 1)[0], "newTag": want.rsplit(":", 1)[1]}]
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(k, f)
        for variant in VARIANTS:
            relays = [c["image"] for w in workloads(render(kubectl, os.path.join(copy, variant))) if w["metadata"]["name"] == "mailsluice" for c in w["spec"]["template"]["spec"]["containers"]]
            need(relays and all(i == want for i in relays), f"{variant}: with another image set in kubernetes/image/, the relay runs it ({', '.join(relays)})")


def check_values(deploy):
    """VALUES.md's checklist: every file under DIR's kubernetes/ and hold-s3/ (its AWS side too)
    holding a value of a row is named in it."""
    with open(os.path.join(deploy, "VALUES.md"), encoding="utf-8") as f:
        rows = [line for line in f if line.startswith("| ") and "`" in line]
    found = [p for folder in ("kubernetes", "hold-s3") for p in glob.glob(os.path.join(deploy, folder, "**", "*"), recursive=True)]
    files = [p for p in found if p.endswith((".yaml", ".toml", ".json"))]
    for row in rows:
        cells = row.split("|")
        shipped = re.findall(r"`([^`]+)`", cells[2])
        if not shipped:
            continue
        value = shipped[0]
        holding = []
        for path in files:
            with open(path, encoding="utf-8") as f:
                if value in f.read():
                    holding.append(os.path.relpath(path, deploy))
        need(holding and all(h in cells[3] for h in holding), f"VALUES.md: every file holding {value} is listed ({', '.join(holding)})")


def check_kubernetes(deploy, binary, kubectl):
    base = os.path.join(deploy, "kubernetes")
    check_values(deploy)
    check_listed(base, "kubernetes")
    for component in ("nlb", "monitoring", "hold", "hold-s3", "image"):
        check_listed(os.path.join(base, component), f"kubernetes/{component}")
    want = image_set(deploy)
    for variant in VARIANTS:
        objects = render(kubectl, os.path.join(deploy, variant))
        config = check_render(objects, binary, variant)
        check_images(objects, want, variant)
        check_pods_by_name(objects, variant)
        spool = config.get("spool", {})
        if spool.get("store") == "s3":
            # The AWS side beside the variant: what the operator applies before it.
            check_spool_policy(os.path.join(deploy, variant, "aws", "spool-policy.json"), spool, variant)
            check_spool_stack(os.path.join(deploy, variant, "aws", "spool-stack.yaml"), spool, variant)
    check_image_set_once(deploy, kubectl)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    args = argparse.ArgumentParser()
    args.add_argument("--mailsluice", required=True)
    args.add_argument("--deploy", default=os.path.join(here, "..", "deploy"))
    args.add_argument("--kubectl", default="kubectl")
    a = args.parse_args()
    try:
        check_compose(os.path.join(a.deploy, "compose.yaml"), a.mailsluice)
        check_kubernetes(a.deploy, a.mailsluice, a.kubectl)
    except (Failed, KeyError, ValueError, TypeError, StopIteration, yaml.YAMLError, tomllib.TOMLDecodeError) as e:
        print(f"check_deploy: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print("check_deploy: all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
