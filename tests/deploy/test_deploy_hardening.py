"""deploy/ hardened (issue 23, item 5): the manifests pass ``kubernetes-validate --strict``, every pod meets the Pod
Security Standard "restricted" profile (checked field by field below), the service-account token is not mounted,
replicas spread and survive drains (pod anti-affinity, a PodDisruptionBudget), the container's memory limit is
matched to the solver's memory budget, and the Dockerfile's base image is pinned by digest.

The restricted profile's controls, from https://kubernetes.io/docs/concepts/security/pod-security-standards/
(v1.30+, "Restricted" and the "Baseline" controls it includes), each checked on every container, init container
and ephemeral container of every pod template: no host namespaces, ports or paths; not privileged; no added
capability but NET_BIND_SERVICE and ALL dropped; allowPrivilegeEscalation false; runAsNonRoot true (pod or
container) and no runAsUser 0; seccomp RuntimeDefault or Localhost (pod or container) and never Unconfined;
no AppArmor unconfined, SELinux types outside the allowed, unsafe sysctls, or procMount other than Default;
only the restricted volume types. kubernetes-validate is the ``test`` extra's (skipped with the reason only
where it is absent).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from parplan.solver.deadline import MIB

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
MANIFESTS = sorted(p for p in (DEPLOY / "kubernetes").glob("*.yaml") if p.name != "kustomization.yaml")

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def docs() -> list[dict]:
    return [d for path in MANIFESTS for d in yaml.safe_load_all(path.read_text()) if d]


def pod_templates() -> list[tuple[str, dict]]:
    out = []
    for d in docs():
        spec = d.get("spec", {})
        if d["kind"] == "Pod":
            out.append((d["metadata"]["name"], spec))
        elif "template" in spec and "spec" in spec["template"]:
            out.append((f"{d['kind']}/{d['metadata']['name']}", spec["template"]["spec"]))
    return out


def restricted_violations(pod: dict) -> list[str]:
    """Every control of the restricted Pod Security Standard that ``pod`` (a PodSpec) breaks."""
    bad = []
    for key in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        if key != "hostUsers" and pod.get(key):
            bad.append(f"{key} is set")
    psc = pod.get("securityContext", {}) or {}
    for vol in pod.get("volumes", []) or []:
        kinds = set(vol) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            bad.append(f"volume {vol['name']}: type {sorted(kinds - RESTRICTED_VOLUMES)} not allowed")
    for sysctl in psc.get("sysctls", []) or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            bad.append(f"unsafe sysctl {sysctl['name']}")
    containers = [("container", c) for c in pod.get("containers", [])]
    containers += [("initContainer", c) for c in pod.get("initContainers", []) or []]
    containers += [("ephemeralContainer", c) for c in pod.get("ephemeralContainers", []) or []]
    if not pod.get("containers"):
        bad.append("no containers")

    def seccomp_type(sc: dict):
        return ((sc or {}).get("seccompProfile") or {}).get("type")

    for where, sc in [("pod", psc)] + [(f"{k} {c['name']}", c.get("securityContext") or {}) for k, c in containers]:
        if seccomp_type(sc) == "Unconfined":
            bad.append(f"{where}: seccomp Unconfined")
        if ((sc.get("appArmorProfile") or {}).get("type")) == "Unconfined":
            bad.append(f"{where}: AppArmor Unconfined")
        if (sc.get("seLinuxOptions") or {}).get("type") not in SELINUX_TYPES:
            bad.append(f"{where}: SELinux type not allowed")
        if sc.get("runAsUser") == 0:
            bad.append(f"{where}: runAsUser 0")
    for kind, c in containers:
        name = f"{kind} {c['name']}"
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            bad.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{name}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            bad.append(f"{name}: capabilities must drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append(f"{name}: adds capabilities {caps.get('add')}")
        if not (sc.get("runAsNonRoot") is True or (psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is not False)):
            bad.append(f"{name}: runAsNonRoot must be true (pod or container)")
        if seccomp_type(sc) not in ("RuntimeDefault", "Localhost") and not (
                seccomp_type(psc) in ("RuntimeDefault", "Localhost") and seccomp_type(sc) is None):
            bad.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost (pod or container)")
        if sc.get("procMount") not in (None, "Default"):
            bad.append(f"{name}: procMount {sc.get('procMount')}")
        for port in c.get("ports", []) or []:
            if port.get("hostPort"):
                bad.append(f"{name}: hostPort {port['hostPort']}")
    return bad


def test_every_pod_meets_the_restricted_pod_security_standard():
    pods = pod_templates()
    assert pods, "no pod templates in deploy/kubernetes"
    for name, pod in pods:
        assert restricted_violations(pod) == [], name


def test_the_restricted_check_can_fail():
    """The checker above rejects what the restricted profile rejects (a check that cannot fail checks nothing)."""
    _, pod = pod_templates()[0]
    bare = {"containers": [{"name": "x", "image": "y"}]}
    found = " ".join(restricted_violations(bare))
    for rule in ("allowPrivilegeEscalation", "drop ALL", "runAsNonRoot", "seccompProfile"):
        assert rule in found, rule
    for path, value, rule in [(("securityContext", "seccompProfile"), {"type": "Unconfined"}, "Unconfined"),
                              (("hostNetwork",), True, "hostNetwork"),
                              (("volumes",), [{"name": "h", "hostPath": {"path": "/"}}], "hostPath")]:
        broken = copy.deepcopy(pod)
        target = broken
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
        assert any(rule in v for v in restricted_violations(broken)), rule
    broken = copy.deepcopy(pod)
    broken["containers"][0]["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
    assert any("adds capabilities" in v for v in restricted_violations(broken))


def test_hardening_beyond_the_profile():
    for name, pod in pod_templates():
        assert pod.get("automountServiceAccountToken") is False, name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc.get("readOnlyRootFilesystem") is True, (name, c["name"])
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            assert "/tmp" in mounts, "a read-only root needs a writable /tmp for libraries that use it"
            (tmp,) = [v for v in pod["volumes"] if v["name"] == mounts["/tmp"]]
            assert "sizeLimit" in tmp["emptyDir"]
        terms = pod["affinity"]["podAntiAffinity"]
        assert terms.get("preferredDuringSchedulingIgnoredDuringExecution") or \
            terms.get("requiredDuringSchedulingIgnoredDuringExecution")


def test_a_disruption_budget_covers_the_deployment():
    by_kind = {d["kind"]: d for d in docs()}
    pdb, deployment = by_kind["PodDisruptionBudget"], by_kind["Deployment"]
    assert pdb["apiVersion"] == "policy/v1"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    assert pdb["spec"].get("minAvailable", 0) >= 1 or "maxUnavailable" in pdb["spec"]
    assert by_kind["HorizontalPodAutoscaler"]["spec"]["minReplicas"] > pdb["spec"].get("minAvailable", 0)


def _quantity_bytes(q: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9}
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(q))
    return int(m.group(1)) * units.get(m.group(2), 1)


def test_memory_limit_matches_the_solver_budget():
    """The container passes --memory-budget-mib below its memory limit, with room for the gRPC runtime (256 MiB
    at least); the Dockerfile's default command passes the same budget."""
    (deployment,) = [d for d in docs() if d["kind"] == "Deployment"]
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    args = dict(a.split("=", 1) for a in c["args"] if "=" in a)
    budget = int(args["--memory-budget-mib"]) * MIB
    limit = _quantity_bytes(c["resources"]["limits"]["memory"])
    assert budget + 256 * MIB <= limit
    assert _quantity_bytes(c["resources"]["requests"]["memory"]) >= budget
    cmd = yaml.safe_load(re.search(r"^CMD\s+(.+)$", (DEPLOY / "Dockerfile").read_text(), re.M).group(1))
    assert cmd[cmd.index("--memory-budget-mib") + 1] == args["--memory-budget-mib"]


DOCKERFILES = sorted(DEPLOY.rglob("Dockerfile"))
KUBERAY = sorted((DEPLOY / "kuberay").glob("*.yaml"))


def _from_is_pinned(text: str) -> list[str]:
    """Every FROM that is neither ``@sha256:<64 hex>`` nor ``@${ARG}`` of an ARG with no default (a required digest)."""
    bad = []
    defaults = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    required = set(re.findall(r"^ARG\s+(\w+)\s*$", text, re.M))
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    if not froms:
        return ["no FROM"]
    for ref in froms:
        m = re.search(r"@\$\{(\w+)\}$", ref)
        if m and m.group(1) in required:
            continue
        ref = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m.group(1), ""), ref)
        if not re.search(r"@sha256:[0-9a-f]{64}$", ref):
            bad.append(ref)
    return bad


def _pip_installs(text: str) -> list[str]:
    return re.findall(r"pip install[^&\n]*", text.replace("\\\n", " "))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_base_image_is_pinned_by_digest(dockerfile):
    assert _from_is_pinned(dockerfile.read_text()) == []


def test_the_pin_check_can_fail():
    assert _from_is_pinned("FROM python:3.11-slim-bookworm\n")
    assert _from_is_pinned("ARG B=python:3.11\nFROM ${B}\n")
    assert _from_is_pinned("ARG D=sha256:abc\nFROM python@${D}\n")  # a default that is no digest
    assert _from_is_pinned("FROM python@${UNDECLARED}\n")
    assert not _from_is_pinned("FROM python@sha256:" + "a" * 64 + "\n")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_image_installs_only_hashed_dependencies(dockerfile):
    """Every pip install is either ``--require-hashes -r <lock>`` (a lock in the repo, every entry hashed) or the
    project itself with ``--no-deps``: no transitive dependency floats."""
    text = dockerfile.read_text()
    installs = _pip_installs(text)
    assert installs
    locks = []
    for cmd in installs:
        if "--require-hashes" in cmd:
            locks.append(re.search(r"-r\s+(\S+)", cmd).group(1))
        else:
            assert "--no-deps" in cmd and re.search(r"\s\.(\s|$)", cmd + " "), cmd
    assert locks, "no --require-hashes install"
    for lock in locks:
        copied = re.search(rf"^COPY\s+(?:--\S+\s+)*(\S*{re.escape(Path(lock).name)})\s", text, re.M).group(1)
        lines = (ROOT / copied).read_text()
        pins = re.findall(r"^([A-Za-z0-9_.\-\[\],]+)==\S+((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)", lines, re.M)
        reqs = [ln for ln in lines.splitlines() if ln and not ln[0].isspace() and not ln.startswith("#")]
        assert reqs and len(pins) == len(reqs), (copied, len(pins), len(reqs))


def _kuberay_docs() -> list[dict]:
    return [d for path in KUBERAY for d in yaml.safe_load_all(path.read_text()) if d]


def _deployment_container() -> dict:
    (deployment,) = [d for d in docs() if d["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]["containers"][0]


def test_image_is_referenced_by_digest_through_kustomize():
    kust = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    on_disk = {p.name for p in MANIFESTS}
    assert set(kust["resources"]) == on_disk
    (image,) = kust["images"]
    assert image["name"] == _deployment_container()["image"].split("@")[0]
    assert image["digest"].startswith("sha256:") and "newTag" not in image
    assert ":" not in _deployment_container()["image"], "a tag moves; kustomize sets the digest"


def test_tls_is_on_by_default_and_the_token_only_with_tls():
    c = _deployment_container()
    args = dict(a.split("=", 1) for a in c["args"])
    assert "--tls-cert" in args and "--tls-key" in args
    assert "--auth-token-file" not in args or "--tls-cert" in args
    (pod,) = [p for _, p in pod_templates()]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")):
        folder, name = args[flag].rsplit("/", 1)
        assert name == key and "secret" in volumes[mounts[folder]], flag


def test_probes_use_the_health_port_and_survive_a_burst():
    c = _deployment_container()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    args = dict(a.split("=", 1) for a in c["args"])
    assert int(args["--health-port"]) == ports["health"] != ports["grpc"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == ports["health"], probe
        assert c[probe].get("timeoutSeconds", 1) >= 2, probe
    ready, live = c["readinessProbe"], c["livenessProbe"]
    assert ready.get("failureThreshold", 3) >= 3
    # liveness gives up later than readiness: a busy pod leaves the endpoints long before it is restarted
    ready_s = ready.get("periodSeconds", 10) * ready.get("failureThreshold", 3)
    live_s = live.get("periodSeconds", 10) * live.get("failureThreshold", 3)
    assert live_s > ready_s and live.get("timeoutSeconds", 1) >= ready.get("timeoutSeconds", 1)


def _policies(documents) -> list[dict]:
    return [d for d in documents if d["kind"] == "NetworkPolicy"]


def _selects(policy: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in policy["spec"]["podSelector"].get("matchLabels", {}).items())


def _only_dns(rule: dict) -> bool:
    return "to" not in rule and {(p["port"], p.get("protocol", "TCP")) for p in rule["ports"]} <= {
        (53, "UDP"), (53, "TCP")}


def test_a_network_policy_admits_only_clients_and_health_and_egress_only_dns():
    (deployment,) = [d for d in docs() if d["kind"] == "Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    (policy,) = [p for p in _policies(docs()) if _selects(p, labels)]
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    ports = {p["name"]: p["containerPort"] for p in _deployment_container()["ports"]}
    by_port = {}
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from") and rule.get("ports"), "every ingress rule names sources and ports"
        for p in rule["ports"]:
            by_port[p["port"]] = rule["from"]
    assert set(by_port) == {ports["grpc"], ports["health"]}
    assert all(src.get("podSelector", {}).get("matchLabels") for src in by_port[ports["grpc"]]), \
        "the gRPC port admits only labelled clients"
    assert all(_only_dns(rule) for rule in policy["spec"]["egress"])


def test_kuberay_pods_are_hardened():
    (cluster,) = [d for d in _kuberay_docs() if d["kind"] == "RayCluster"]
    pods = [("head", cluster["spec"]["headGroupSpec"]["template"])] + [
        (g["groupName"], g["template"]) for g in cluster["spec"]["workerGroupSpecs"]]
    autoscaled = cluster["spec"].get("enableInTreeAutoscaling", False)
    for name, template in pods:
        pod = template["spec"]
        # only the head's injected autoscaler sidecar calls the Kubernetes API (and only when autoscaling is on)
        assert pod.get("automountServiceAccountToken") is (name == "head" and autoscaled), name
        assert restricted_violations(pod) == [], name
        for c in pod["containers"]:
            assert all(p["containerPort"] != 6379 for p in c.get("ports", [])), "GCS/Redis 6379 is not exposed"
        policies = [p for p in _policies(_kuberay_docs()) if _selects(p, template["metadata"]["labels"])]
        extra = [p for p in policies if "Ingress" not in p["spec"]["policyTypes"]]
        for p in extra:  # the head's API-server egress: ports 443/6443 only, on the head only
            assert name == "head" and autoscaled and all(
                "to" not in r and {q["port"] for q in r["ports"]} <= {443, 6443} for r in p["spec"]["egress"]), p
        (policy,) = [p for p in policies if p not in extra]
        own = policy["spec"]["podSelector"]["matchLabels"]
        assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        for rule in policy["spec"]["ingress"]:
            assert rule["from"] and all(src.get("podSelector", {}).get("matchLabels") == own and
                                        "namespaceSelector" not in src for src in rule["from"]), rule
        for rule in policy["spec"]["egress"]:
            assert _only_dns(rule) or all(dst.get("podSelector", {}).get("matchLabels") == own
                                          for dst in rule["to"]), rule


def _validator() -> str | None:
    exe = Path(sys.executable).with_name("kubernetes-validate")
    return str(exe) if exe.exists() else shutil.which("kubernetes-validate")


def test_manifests_pass_kubernetes_validate_strict():
    exe = _validator()
    if exe is None:
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[test]' installs it)")
    out = subprocess.run([exe, "--strict", *map(str, MANIFESTS)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed") == len(MANIFESTS), out.stdout


def test_kubernetes_validate_strict_rejects_an_unknown_field(tmp_path):
    exe = _validator()
    if exe is None:
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[test]' installs it)")
    (deployment,) = [d for d in docs() if d["kind"] == "Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(deployment))
    out = subprocess.run([exe, "--strict", str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
