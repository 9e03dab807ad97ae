"""The job files of frameworks/jobs.py on several cluster.pools (issue 21): the Slurm heterogeneous job starts each
host at the node rank that puts every pipeline stage on its pool. The script runs under bash with ``scontrol``,
``srun`` and ``torchrun`` stubbed (srun runs the step once per host, in reverse order, with ``SLURMD_NODENAME``
set; torchrun records its arguments), so the node ranks are the script's own, not a re-statement of them; the
JobSet that ``--emit pytorchjob`` writes on pools runs each pod's command the same way."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from parplan.library.evaluation import evaluate_spec
from parplan.costmodel.spec.spec import PlanSpec
from parplan.frameworks.export import export_plan
from parplan.frameworks.jobs import emit_job
from parplan.frameworks.loader import validate_spec

MODEL = dict(name="small", num_layers=6, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
             num_kv_heads=4, vocab_size=32000, gated_mlp=True, tie_embeddings=False)
# pool 0: H100 nodes of 4; pool 1: A100 nodes of 2. Stages 0 and 2 on pool 0, stage 1 on pool 1; 4 ranks a stage
POOLS = [dict(gpu="H100-SXM-80GB", num_gpus=8, gpus_per_node=4), dict(gpu="A100-SXM-80GB", num_gpus=4, gpus_per_node=2)]
PLAN = dict(tp=2, pp=3, dp=2, micro_batch_size=1, num_microbatches=8, stage_layers=[3, 1, 2],
            recompute_layers=[0, 0, 0], stage_pools=[0, 1, 0])
NODES = {0: ["h100-a"], 1: ["a100-a", "a100-b"], 2: ["h100-b"]}  # each hetjob component's nodes

STUBS = {
    "scontrol": '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && tr "," "\\n" <<< "$3"\n',
    # srun: the head-node lookup prints an address; the step runs once per host, last host first
    "srun": ('#!/bin/bash\nif [[ " $* " == *" hostname --ip-address"* ]]; then echo 10.0.0.1; exit 0; fi\n'
             'while [[ "$1" == --* ]]; do shift; done\n'
             'hosts=( $PARPLAN_HOSTS ); for (( i=${#hosts[@]}-1; i>=0; i-- )); do\n'
             '  SLURMD_NODENAME="${hosts[$i]}" "$@" || exit 1; done\n'),
    "torchrun": '#!/bin/bash\necho "$SLURMD_NODENAME $*" >> "$PARPLAN_TEST_LOG"\n',
}


def pools_plan():
    spec = validate_spec({"framework": "any", "model": MODEL, "cluster": {"pools": POOLS},
                          "training": {"seq_len": 2048, "global_batch_size": 16, "precision": "bf16"}})
    return spec, evaluate_spec(spec, PlanSpec(**PLAN)).plan


def run_script(tmp_path: Path, text: str) -> dict[str, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    log = tmp_path / "torchrun.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_SUBMIT_DIR": str(tmp_path),
           "PARPLAN_TEST_LOG": str(log), **{f"SLURM_JOB_NODELIST_HET_GROUP_{k}": ",".join(v) for k, v in NODES.items()}}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return {line.split()[0]: line.split()[1:] for line in log.read_text().splitlines()}


def arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def run_pods(tmp_path: Path, container: dict, index_variable: str, pods: int) -> list[list[str]]:
    """The torchrun argv of each of ``pods`` pods running ``container``'s command under bash, the pod's index in
    ``index_variable`` (Kubernetes' JOB_COMPLETION_INDEX, Volcano's VC_TASK_INDEX)."""
    stub = tmp_path / "bin"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "torchrun").write_text(STUBS["torchrun"])
    (stub / "torchrun").chmod(0o755)
    log, out = tmp_path / "torchrun.log", []
    for index in range(pods):
        log.write_text("")
        env = {**os.environ, "PATH": f"{stub}:{os.environ['PATH']}", index_variable: str(index),
               "PARPLAN_TEST_LOG": str(log), "SLURMD_NODENAME": "pod"}
        done = subprocess.run(container["command"] + container["args"], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        out.append(log.read_text().split()[1:])
    return out


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_slurm_hetjob_starts_each_stage_on_its_pool(tmp_path):
    spec, plan = pools_plan()
    job = emit_job(spec, plan, export_plan(spec, plan, "megatron"), "slurm")
    text = job.text
    components = text.split("#SBATCH hetjob")
    assert len(components) == 3  # one per run of stages on one pool: [0], [1], [0]
    assert [c.count("--constraint=REPLACE-ME-H100") for c in components] == [1, 0, 1]
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=2" in components[1]
    started = run_script(tmp_path, text)
    hosts = [h for k in sorted(NODES) for h in NODES[k]]
    assert sorted(started) == sorted(hosts)
    world = 0
    for host, argv in started.items():
        rank, nproc = int(arg(argv, "--node-rank")), int(arg(argv, "--nproc-per-node"))
        assert hosts[rank] == host and arg(argv, "--nnodes") == "4" and arg(argv, "--master-addr") == "10.0.0.1"
        assert argv[argv.index("pretrain_gpt.py") + 1:].count("--pipeline-model-parallel-layout") == 1
        world += nproc
    # global ranks by node rank (torchrun: the ranks of lower node ranks first): stage s = ranks [4s, 4s+4)
    first = 0
    for host in hosts:
        argv = started[host]
        n = int(arg(argv, "--nproc-per-node"))
        stage = first // 4
        pool = plan.stage_pools[stage]
        assert host.startswith("h100" if pool == 0 else "a100") and (first + n - 1) // 4 == stage
        first += n
    assert world == plan.num_gpus == 12


def test_pytorchjob_on_pools_is_a_jobset_with_one_indexed_job_per_block(tmp_path):
    spec, plan = pools_plan()
    job = emit_job(spec, plan, export_plan(spec, plan, "megatron"), "pytorchjob")
    doc = yaml.safe_load(job.text)
    assert doc["kind"] == "JobSet" and doc["spec"]["network"]["enableDNSHostnames"] is True
    blocks = doc["spec"]["replicatedJobs"]
    selectors = [b["template"]["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for b in blocks]
    assert selectors == ["REPLACE-ME-H100-SXM-80GB", "REPLACE-ME-A100-SXM-80GB", "REPLACE-ME-H100-SXM-80GB"]
    started = []  # (replicated Job, pod index, torchrun argv): each pod's command run under bash
    for b in blocks:
        tmpl = b["template"]["spec"]
        container = tmpl["template"]["spec"]["containers"][0]
        assert "$(" not in container["command"][2]  # the kubelet would expand $(...)
        started += [(b["name"], index, argv) for index, argv in
                    enumerate(run_pods(tmp_path, container, "JOB_COMPLETION_INDEX", tmpl["completions"]))]
    ranks = sorted((int(arg(argv, "--node-rank")), name, int(arg(argv, "--nproc-per-node")))
                   for name, _, argv in started)
    assert [r for r, _, _ in ranks] == list(range(4))
    first = 0
    for _, name, n in ranks:  # node ranks in order cover stage s's ranks [4s, 4s+4) on its pool's replicated Job
        stage = first // 4
        assert selectors[int(name[1:])].endswith("H100-SXM-80GB" if plan.stage_pools[stage] == 0 else "A100-SXM-80GB")
        first += n
    assert first == plan.num_gpus
    assert all(arg(argv, "--master-addr") == f"{doc['metadata']['name']}-b0-0-0.{doc['metadata']['name']}"
               for _, _, argv in started)


# ------------------------------------------------------------------ Kueue topology hints (issue 43 item 2)

import gzip  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

from parplan.frameworks import topology_hints as th  # noqa: E402

# the CRDs the manifests are checked against, pinned (tests/data/crds/README.md names each file's repo@commit)
CRDS = Path(__file__).resolve().parents[1] / "data" / "crds"


def _job(spec_data: dict, plan: dict, launcher: str = "pytorchjob"):
    spec = validate_spec(spec_data)
    plan = evaluate_spec(spec, PlanSpec(**plan)).plan
    return spec, plan, list(yaml.safe_load_all(emit_job(spec, plan, export_plan(spec, plan, "megatron"),
                                                        launcher).text))


def _nvl72(tp: int, gpus: int = 16) -> dict:
    return {"framework": "any", "model": MODEL, "training": {"seq_len": 2048, "global_batch_size": 32},
            "cluster": {"gpu": "GB200-NVL72", "num_gpus": gpus, "gpus_per_node": 4}}


def _two_racks() -> dict:
    """144 GB200 GPUs (two NVL72 racks) on nodes of 4: TP 8 spans 2 pods on NVLink, DP 18 spans both racks."""
    return {**_nvl72(8, gpus=144), "training": {"seq_len": 2048, "global_batch_size": 36}}


TWO_RACKS_PLAN = dict(tp=8, pp=1, dp=18, micro_batch_size=1)


def _annotations(doc: dict) -> list[dict]:
    if doc["kind"] == "PyTorchJob":
        return [r["template"]["metadata"]["annotations"] for r in doc["spec"]["pytorchReplicaSpecs"].values()]
    if doc["kind"] == "Job":  # Volcano: its topology is in the Job's fields, not annotations
        return [t["template"].get("metadata", {}).get("annotations", {}) for t in doc["spec"]["tasks"]]
    return [j["template"]["spec"]["template"]["metadata"]["annotations"] for j in doc["spec"]["replicatedJobs"]]


def test_tp_within_a_node_asks_only_a_preferred_block():
    spec, plan, docs = _job({"framework": "any", "model": MODEL, "training": {"seq_len": 2048, "global_batch_size": 32},
                             "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 16, "gpus_per_node": 8}},
                            dict(tp=8, pp=2, dp=1, micro_batch_size=1, stage_layers=[3, 3]))
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    for a in _annotations(job):
        assert a[th.PREFERRED] == th.BLOCK_LEVEL and th.SLICE_SIZE not in a and th.REQUIRED not in a
        assert a[th.GROUP_NAME] == job["metadata"]["name"]  # Master and Worker fitted together


def test_an_nvlink_group_over_several_nodes_needs_its_rack():
    """TP 8 on GB200 nodes of 4 GPUs: each TP group spans 2 pods of one NVL72 rack (the cost model priced it on
    NVLink); a job that fits one rack asks for the rack; on two racks the groups inside a rack are slices, which a
    PyTorchJob cannot state (it says so)."""
    spec, plan, docs = _job(_nvl72(8), dict(tp=8, pp=2, dp=1, micro_batch_size=1, stage_layers=[3, 3]))
    h = th.topology_hints(spec, plan, 4, 4)
    assert h.slice_pods == 4 and "tp" in h.nvlink_groups  # PP 2 over 16 GPUs < 72 is on NVLink too
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    assert all(a[th.REQUIRED] == th.NVLINK_LEVEL for a in _annotations(job))
    # two racks: TP 8 and DP 9 (72 GPUs, one rack) on NVLink, PP 2 across the racks
    big = th.topology_hints(validate_spec(_nvl72(8, gpus=144)), plan.model_copy(update={"dp": 9}), 4, 36)
    assert big.slice_pods == 18 and big.nvlink_groups == ("tp", "dp_cp")
    assert th.kueue_annotations(big, 36) == {th.PREFERRED: th.BLOCK_LEVEL, th.SLICE_REQUIRED: th.NVLINK_LEVEL,
                                             th.SLICE_SIZE: "18"}
    assert th.pytorchjob_warning(big) is not None and th.pytorchjob_warning(h) is None


def _strict(schema: dict) -> dict:
    """The CRD schema with unknown properties refused wherever it lists properties (kubernetes-validate --strict's
    rule), except where it preserves unknown fields."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get(
                "x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def _crd_schema(name: str, version: str) -> dict:
    with gzip.open(CRDS / name, "rt") as f:
        crd = json.load(f)
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return _strict(v["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("case", ["pytorchjob", "jobset", "volcano", "volcano-pools"])
def test_manifests_with_topology_annotations_pass_the_crd_schemas(case, tmp_path):
    """Each PyTorchJob / JobSet / Volcano Job passes its CRD's schema (training-operator v1.9.0, jobset main, volcano
    master; unknown fields refused), and every pod template, as a core v1 PodTemplate, passes kubernetes-validate
    --strict."""
    jsonschema = pytest.importorskip("jsonschema")
    if case == "pytorchjob":
        _, _, docs = _job(_nvl72(8), dict(tp=8, pp=2, dp=1, micro_batch_size=1, stage_layers=[3, 3]))
        crd, version, kind = "kubeflow.org_pytorchjobs.json.gz", "v1", "PyTorchJob"
    elif case == "volcano":
        _, _, docs = _job(_two_racks(), TWO_RACKS_PLAN, "volcano")
        crd, version, kind = "batch.volcano.sh_jobs.json.gz", "v1alpha1", "Job"
    else:
        spec, plan = pools_plan()
        launcher = "pytorchjob" if case == "jobset" else "volcano"
        docs = yaml.safe_load_all(emit_job(spec, plan, export_plan(spec, plan, "megatron"), launcher).text)
        crd, version, kind = (("jobset.x-k8s.io_jobsets.json.gz", "v1alpha2", "JobSet") if case == "jobset" else
                              ("batch.volcano.sh_jobs.json.gz", "v1alpha1", "Job"))
    (job,) = [d for d in docs if d["kind"] == kind]
    if kind == "Job":
        assert job["spec"]["networkTopology"]["mode"] in ("hard", "soft")
        assert (case == "volcano") == all("partitionPolicy" in t for t in job["spec"]["tasks"])
    jsonschema.validate(job, _crd_schema(crd, version))
    bad = json.loads(json.dumps(job))
    _annotations(bad)  # the same documents with a misspelt field are refused
    bad["spec"]["unknownField"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _crd_schema(crd, version))
    templates = ([r["template"] for r in job["spec"]["pytorchReplicaSpecs"].values()] if kind == "PyTorchJob" else
                 [t["template"] for t in job["spec"]["tasks"]] if kind == "Job" else
                 [j["template"]["spec"]["template"] for j in job["spec"]["replicatedJobs"]])
    exe = Path(sys.executable).with_name("kubernetes-validate")
    exe = str(exe) if exe.exists() else shutil.which("kubernetes-validate")
    if exe is None:
        pytest.skip("kubernetes-validate is not installed (the test extra)")
    files = []
    for i, t in enumerate(templates):
        assert kind == "Job" or any(k.startswith("kueue.x-k8s.io/podset-") for k in t["metadata"]["annotations"])
        path = tmp_path / f"t{i}.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "PodTemplate",
                                        "metadata": {"name": f"t{i}"}, "template": t}))
        files.append(str(path))
    out = subprocess.run([exe, "--strict", *files], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.count("passed") == len(files), out.stdout + out.stderr


def test_kai_annotations_on_the_workload_follow_the_kueue_placement():
    """KAI scheduler reads its topology from the workload's own annotations: the job inside one NVLink domain
    (required rack) where the Kueue hints require it, else one block preferred; always naming the Topology."""
    _, _, docs = _job(_nvl72(8), dict(tp=8, pp=2, dp=1, micro_batch_size=1, stage_layers=[3, 3]))
    (job,) = [d for d in docs if d["kind"] == "PyTorchJob"]
    kai = {k: v for k, v in job["metadata"]["annotations"].items() if k.startswith("kai.scheduler/")}
    assert all(a[th.REQUIRED] == th.NVLINK_LEVEL for a in _annotations(job))
    assert kai == {th.KAI_TOPOLOGY: th.KAI_TOPOLOGY_NAME, th.KAI_REQUIRED: th.NVLINK_LEVEL}
    spec, plan = pools_plan()
    jobset = yaml.safe_load(emit_job(spec, plan, export_plan(spec, plan, "megatron"), "pytorchjob").text)
    kai = {k: v for k, v in jobset["metadata"]["annotations"].items() if k.startswith("kai.scheduler/")}
    assert kai == {th.KAI_TOPOLOGY: th.KAI_TOPOLOGY_NAME, th.KAI_PREFERRED: th.BLOCK_LEVEL}
    assert all(a[th.PREFERRED] == th.BLOCK_LEVEL for a in _annotations(jobset))


def _node_ranks(tmp_path: Path, task: dict) -> list[int]:
    """Each pod's node rank, from running its command under bash with VC_TASK_INDEX set (Volcano's env plugin)."""
    container = task["template"]["spec"]["containers"][0]
    return [int(arg(argv, "--node-rank")) for argv in run_pods(tmp_path, container, "VC_TASK_INDEX", task["replicas"])]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_volcano_partitions_are_the_nvlink_slices(tmp_path):
    """On two NVL72 racks the TP groups (2 pods each) must each share a rack: Volcano numbers a task's pods into
    partitions by task index // partitionSize, and the pods of each partition, run as Volcano runs them, hold the
    node ranks of one NVLink slice; the job as a whole is only preferred close (soft)."""
    spec, plan, docs = _job(_two_racks(), TWO_RACKS_PLAN, "volcano")
    (job,) = [d for d in docs if d["kind"] == "Job"]
    h = th.topology_hints(spec, plan, 4, 36)
    assert h.nvlink_groups == ("tp",) and h.slice_pods == 2
    assert job["spec"]["networkTopology"] == {"mode": "soft"} and job["spec"]["minAvailable"] == 36
    (task,) = job["spec"]["tasks"]
    policy = task["partitionPolicy"]
    assert policy["networkTopology"] == {"mode": "hard", "highestTierAllowed": th.VOLCANO_NVLINK_TIER}
    assert policy["totalPartitions"] * policy["partitionSize"] == task["replicas"]
    ranks = _node_ranks(tmp_path, task)
    assert sorted(ranks) == list(range(36))
    for index, rank in enumerate(ranks):  # Volcano's partition of the pod = the NVLink slice of its node rank
        assert index // policy["partitionSize"] == rank // h.slice_pods
    _, _, one_rack = _job(_nvl72(8), dict(tp=8, pp=2, dp=1, micro_batch_size=1, stage_layers=[3, 3]), "volcano")
    (small,) = [d for d in one_rack if d["kind"] == "Job"]
    assert small["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": th.VOLCANO_NVLINK_TIER}
    assert "partitionPolicy" not in small["spec"]["tasks"][0]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_volcano_on_pools_starts_each_stage_on_its_pool(tmp_path):
    """Several pools: one task per block of stages, each with its pool's node selector, in rank order."""
    spec, plan = pools_plan()
    job = yaml.safe_load(emit_job(spec, plan, export_plan(spec, plan, "megatron"), "volcano").text)
    tasks = job["spec"]["tasks"]
    assert [t["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] for t in tasks] == [
        "REPLACE-ME-H100-SXM-80GB", "REPLACE-ME-A100-SXM-80GB", "REPLACE-ME-H100-SXM-80GB"]
    ranks = [r for i, t in enumerate(tasks) for r in _node_ranks(tmp_path / str(i), t)]
    assert ranks == list(range(4))
