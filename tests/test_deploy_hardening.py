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

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))

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


def test_base_image_is_pinned_by_digest():
    text = (DEPLOY / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    assert froms
    for ref in froms:
        ref = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], ref)
        assert re.search(r"@sha256:[0-9a-f]{64}$", ref), ref


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
