"""Launch a plan: a Slurm batch script (sbatch + srun + torchrun) or a Kubeflow PyTorchJob, wrapping one
framework export (frameworks/export.py). Pure functions of (Spec, Plan, Export).

Shapes, from shared/reference/aesthetics-ecosystem.md B3:

* Slurm: one task per node running torchrun, the pattern of torchtitan v0.2.2's
  ``multinode_trainer.slurm`` (``--nodes N --ntasks-per-node 1 --gpus-per-node G``, the head node's
  address as the c10d rendezvous endpoint, ``--rdzv-id $SLURM_JOB_ID``); torchrun's flags as in
  ``torch.distributed.run`` (``--nnodes --nproc-per-node --rdzv-backend --rdzv-endpoint --rdzv-id``).
* PyTorchJob: Kubeflow Training Operator v1 (``kubeflow.org/v1``, release-1.9
  ``pkg/apis/kubeflow.org/v1/pytorch_types.go``): ``spec.nprocPerNode`` (a string),
  ``pytorchReplicaSpecs.Master`` (1 replica) and ``Worker`` (nodes - 1), container named ``pytorch``
  (``PyTorchJobDefaultContainerName``); the operator injects ``MASTER_ADDR/PORT``, ``WORLD_SIZE``,
  ``RANK`` and torchrun's ``PET_*`` variables (``pkg/controller.v1/pytorch/envvar.go``), so a bare
  ``torchrun`` needs no rendezvous flags. ``/dev/shm`` is a memory ``emptyDir`` for NCCL.

Cluster-specific values (partition, account, container image, data paths) are left as marked
placeholders, never guessed. World size = nodes × GPUs per node = the plan's tp·cp·pp·dp.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
import hashlib
import json
import shlex

import yaml

from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.export_common import Export, ExportError, cluster_words, comment_block, plan_summary_line
from parplan.frameworks.export_megatron import megatron_argv
from parplan.frameworks.pool_placement import host_order_lines, rank_blocks, several_pools
from parplan.frameworks.topology_hints import (kai_annotations, kueue_annotations, pytorchjob_warning, slices_fit,
                                               topology_hints)

LAUNCHERS: tuple[str, ...] = ("slurm", "pytorchjob", "volcano")
RDZV_PORT = 29500
PLACEHOLDER = "REPLACE-ME"


def job_name(plan: Plan) -> str:
    """``parplan-<8 hex>``: a stable name from the plan's content."""
    data = plan.model_dump(mode="json")
    if data.get("cp_comm_type") == "p2p":  # the default: names of plans from before the field stay the same
        del data["cp_comm_type"]
    for key, default in (("zero_replicas", 1), ("optimizer_states", None), ("optimizer_offload_fraction", 0.0)):
        if data[key] == default:  # the memory-side choices name a job only where made (today's names stay)
            del data[key]
    for key in ("moe_fp8_dispatch", "moe_a2a_overlap", "activation_offload_layers", "stage_pools"):  # added later: off (0),
        if not data.get(key):  #                                                          they leave the name as it was
            data.pop(key, None)
    digest = hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return f"parplan-{digest[:8]}"


def node_layout(spec: Spec, plan: Plan) -> tuple[int, int]:
    """(nodes, processes per node) for the plan's world size on nodes of ``cluster.gpus_per_node`` GPUs."""
    world, per_node = plan.num_gpus, spec.cluster.gpus_per_node
    if world <= per_node:
        return 1, world
    if world % per_node:
        raise ExportError(f"cluster.num_gpus = {world} is not a whole number of {per_node}-GPU nodes "
                          f"(cluster.gpus_per_node); a launcher needs equal processes per node")
    return world // per_node, per_node


def _program(export: Export, config_dir: str) -> list[str]:
    """The training program and its arguments, as torchrun receives them."""
    if export.target == "torchtitan":
        return ["-m", "torchtitan.train", "--job.config_file", f"{config_dir}/{export.filename}"]
    if export.target == "deepspeed":
        return [PLACEHOLDER + "-train-script.py", "--deepspeed", "--deepspeed_config", f"{config_dir}/{export.filename}"]
    if export.target == "bridge":
        return ["scripts/training/run_recipe.py", "--recipe", PLACEHOLDER + "-recipe"]
    return ["pretrain_gpt.py"]


def _sh(token: str) -> str:
    """Quote for bash, keeping ``${VAR}`` expansions."""
    return f'"{token}"' if "$" in token else shlex.quote(token)


def _megatron_env(export: Export) -> dict[str, str]:
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if "export CUDA_DEVICE_MAX_CONNECTIONS=1" in export.text else {}


def slurm_script(spec: Spec, plan: Plan, export: Export) -> Export:
    nodes, per_node = node_layout(spec, plan)
    name = job_name(plan)
    lines = ["#!/bin/bash",
             f"#SBATCH --job-name={name}",
             f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --gpus-per-node={per_node}",
             "#SBATCH --exclusive",
             f"##SBATCH --partition={PLACEHOLDER}",
             f"##SBATCH --account={PLACEHOLDER}",
             "##SBATCH --time=04:00:00",
             ""]
    lines += comment_block([f"{export.target} job for '{spec.model.name}' on {nodes} x {per_node} {spec.cluster.gpu} "
                            f"-- generated by parplan (solver-cli)", f"plan: {plan_summary_line(plan)}"]
                           + ([f"WARNINGS ({len(export.warnings)}) from the {export.target} export:"]
                              + [f"  - {w}" for w in export.warnings] if export.warnings else [])).splitlines()
    lines += ["set -euo pipefail", "",
              "# export NCCL_SOCKET_IFNAME=" + PLACEHOLDER + "   # your network interface",
              "export NCCL_DEBUG=WARN", ""]
    config_dir = "${SLURM_SUBMIT_DIR}"
    program = _program(export, config_dir)
    extra = ""
    if export.target == "megatron":
        body = export.text.split("\n", 1)[1]  # drop the shebang
        lines += ["# ---- Megatron-LM arguments (solver-cli --export megatron)", body.rstrip(), ""]
        extra = ' "${MEGATRON_ARGS[@]}"'
    elif export.target == "bridge":
        lines += ["# ---- Megatron-Bridge overrides (solver-cli --export bridge)",
                  f"cat > \"{config_dir}/{export.filename}\" <<'PARPLAN_EOF'", export.text.rstrip(), "PARPLAN_EOF", ""]
        extra = f" $(grep -v '^#' \"{config_dir}/{export.filename}\")"
    else:
        lines += [f"# ---- {export.target} config (solver-cli --export {export.target})",
                  f"cat > \"{config_dir}/{export.filename}\" <<'PARPLAN_EOF'", export.text.rstrip(), "PARPLAN_EOF", ""]
    lines += ['nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )',
              'head_node_ip=$(srun --nodes=1 --ntasks=1 -w "${nodes[0]}" hostname --ip-address | awk \'{print $1}\')',
              "",
              f"srun torchrun --nnodes {nodes} --nproc-per-node {per_node} --rdzv-id \"$SLURM_JOB_ID\" "
              f"--rdzv-backend c10d --rdzv-endpoint \"$head_node_ip:{RDZV_PORT}\" \\",
              "    " + " ".join(_sh(t) for t in program) + extra]
    return Export(target=f"slurm+{export.target}", text="\n".join(lines) + "\n", filename=f"{name}.sbatch",
                  warnings=export.warnings)


@dataclass
class PodParts:
    """What every pod of a Kubernetes job runs: the program's arguments, its environment, mounts and volumes, and
    the documents it needs beside the job (a ConfigMap holding a TOML/JSON config)."""
    args: list[str]
    env: list[dict]
    mounts: list[dict]
    volumes: list[dict]
    docs: list[dict]


def pod_parts(spec: Spec, plan: Plan, export: Export) -> PodParts:
    name, config_dir = job_name(plan), "/parplan"
    docs: list[dict] = []
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    args = _program(export, config_dir)
    if export.target == "megatron":
        args += megatron_argv(spec, plan)
    elif export.target == "bridge":
        args += [line for line in export.text.splitlines() if line and not line.startswith("#")]
    else:
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"},
                     "data": {export.filename: export.text}})
        mounts.append({"name": "plan-config", "mountPath": config_dir})
        volumes.append({"name": "plan-config", "configMap": {"name": f"{name}-config"}})
    env = [{"name": k, "value": v} for k, v in _megatron_env(export).items()] + [{"name": "NCCL_DEBUG", "value": "WARN"}]
    return PodParts(args, env, mounts, volumes, docs)


def kai_line(hints) -> str:
    """The job file's comment on KAI scheduler's annotations (frameworks/topology_hints.py)."""
    return (f"KAI scheduler topology: {', '.join(f'{k}={v}' for k, v in kai_annotations(hints).items())} "
            f"(set schedulerName: kai-scheduler and the kai.scheduler/queue label to schedule with KAI)")


def pytorchjob_manifest(spec: Spec, plan: Plan, export: Export) -> Export:
    nodes, per_node = node_layout(spec, plan)
    name = job_name(plan)
    parts = pod_parts(spec, plan, export)
    docs, volumes = parts.docs, parts.volumes
    container = {"name": "pytorch", "image": f"{PLACEHOLDER}-image", "command": ["torchrun"], "args": parts.args,
                 "env": parts.env, "resources": {"limits": {"nvidia.com/gpu": per_node}}, "volumeMounts": parts.mounts}

    hints = topology_hints(spec, plan, per_node, nodes)  # Kueue TAS annotations (frameworks/topology_hints.py)
    topology_warning = pytorchjob_warning(hints)
    warnings = list(export.warnings) + ([topology_warning] if topology_warning else [])

    def replica(count: int) -> dict:
        meta = {"annotations": kueue_annotations(hints, count, group=name, slices=topology_warning is None)}
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"metadata": meta,
                             "spec": {"containers": [copy.deepcopy(container)], "volumes": copy.deepcopy(volumes)}}}

    specs = {"Master": replica(1)}
    if nodes > 1:
        specs["Worker"] = replica(nodes - 1)
    docs.append({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                 "metadata": {"name": name, "annotations": {"parplan/plan": plan_summary_line(plan),
                                                            **kai_annotations(hints)}},
                 "spec": {"nprocPerNode": str(per_node), "pytorchReplicaSpecs": specs}})
    head = comment_block([f"Kubeflow PyTorchJob ({export.target}) for '{spec.model.name}' on {nodes} x {per_node} "
                          f"{spec.cluster.gpu} -- generated by parplan (solver-cli)",
                          f"world size {nodes} x {per_node} = {plan.num_gpus} = tp·cp·pp·dp; replace {PLACEHOLDER}-*",
                          f"Kueue topology: {hints.reason()}", kai_line(hints)]
                         + [f"warning: {w}" for w in warnings])
    text = head + yaml.dump_all(docs, Dumper=_BlockDumper, sort_keys=False, width=1000)
    return Export(target=f"pytorchjob+{export.target}", text=text, filename=f"{name}.yaml", warnings=warnings)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the embedded config files) as literal blocks, so the manifest stays readable."""


def _str_representer(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_representer)


# ------------------------------------------------------------------------------- several cluster.pools


def _program_array(export: Export) -> list[str]:
    """Bash lines defining ``PROGRAM=( ... )``: the training program and its arguments (the export embedded)."""
    config_dir = "${SLURM_SUBMIT_DIR}"
    program = " ".join(_sh(t) for t in _program(export, config_dir))
    if export.target == "megatron":
        body = export.text.split("\n", 1)[1]  # drop the shebang
        return ["# ---- Megatron-LM arguments (solver-cli --export megatron)", body.rstrip(), "",
                f'PROGRAM=( {program} "${{MEGATRON_ARGS[@]}}" )']
    return ["# ---- Megatron-Bridge overrides (solver-cli --export bridge)",
            f"cat > \"{config_dir}/{export.filename}\" <<'PARPLAN_EOF'", export.text.rstrip(), "PARPLAN_EOF", "",
            f"PROGRAM=( {program} $(grep -v '^#' \"{config_dir}/{export.filename}\") )"]


def slurm_pools_script(spec: Spec, plan: Plan, export: Export) -> Export:
    """A heterogeneous Slurm job (``#SBATCH hetjob``): one component per run of consecutive stages on one pool
    (frameworks/pool_placement.py), in rank order, each asking for its pool's nodes by a feature
    (``--constraint``, a placeholder naming the pool's GPU: a site's node feature or partition is not guessed).

    Why components and not one allocation with a hostfile: each pool's nodes are chosen by the scheduler from
    the pool's feature and co-scheduled (Slurm >= 17.11 heterogeneous jobs, slurm.schedmd.com/
    heterogeneous_jobs.html; ``SLURM_JOB_NODELIST_HET_GROUP_<k>`` lists component k's nodes), where
    ``SLURM_HOSTFILE`` with ``--distribution=arbitrary`` needs the user to name every node. The node rank is
    not left to srun's task numbering nor to a c10d rendezvous (whose node ranks follow join order): each task
    finds its host in the host list built from the components in order and passes that index to torchrun as
    ``--node-rank`` (static rendezvous), so stage s's ranks run on its pool's nodes."""
    blocks = rank_blocks(spec, plan)
    name = job_name(plan)
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}"]
    for i, b in enumerate(blocks):
        if i:
            lines.append("#SBATCH hetjob")
        lines += [f"#SBATCH --nodes={b.nodes}", "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={b.per_node}",
                  "#SBATCH --exclusive", f"#SBATCH --constraint={PLACEHOLDER}-{b.gpu}"]
        if not i:
            lines += [f"##SBATCH --partition={PLACEHOLDER}", f"##SBATCH --account={PLACEHOLDER}",
                      "##SBATCH --time=04:00:00"]
    hosts = sum(b.nodes for b in blocks)
    head = [f"{export.target} job for '{spec.model.name}' on {cluster_words(spec)} (several cluster.pools) -- "
            f"generated by parplan (solver-cli)", f"plan: {plan_summary_line(plan)}",
            f"one hetjob component per block of stages on one pool, in rank order; set each --constraint to the "
            f"node feature of that pool's GPUs (or give the component its pool's --partition)"]
    head += [f"component {i}: {line.strip()}" for i, line in enumerate(host_order_lines(spec, plan)[1:])]
    if export.warnings:
        head += [f"WARNINGS ({len(export.warnings)}) from the {export.target} export:"]
        head += [f"  - {w}" for w in export.warnings]
    lines += [""] + comment_block(head).splitlines()
    lines += ["set -euo pipefail", "", "# export NCCL_SOCKET_IFNAME=" + PLACEHOLDER + "   # your network interface",
              "export NCCL_DEBUG=WARN", ""]
    lines += _program_array(export) + [""]
    nprocs = " ".join(str(b.per_node) for b in blocks for _ in range(b.nodes))
    lines += ["# the hosts in rank order: component 0's nodes, then component 1's, ...",
              "hosts=( " + " ".join(f'$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_{i}")'
                                    for i in range(len(blocks))) + " )",
              f'[ "${{#hosts[@]}}" -eq {hosts} ] || {{ echo "expected {hosts} nodes, got ${{#hosts[@]}}" >&2; exit 1; }}',
              f'export PARPLAN_HOSTS="${{hosts[*]}}" PARPLAN_NPROCS="{nprocs}"   # processes on each host, in order',
              'head_node_ip=$(srun --het-group=0 --nodes=1 --ntasks=1 -w "${hosts[0]}" hostname --ip-address | '
              "awk '{print $1}')", "",
              f"srun --het-group=0-{len(blocks) - 1} bash -c '",
              '  hosts=( $PARPLAN_HOSTS ); nprocs=( $PARPLAN_NPROCS ); rank=""',
              '  for i in "${!hosts[@]}"; do [ "${hosts[$i]}" = "$SLURMD_NODENAME" ] && rank=$i; done',
              '  [ -n "$rank" ] || { echo "$SLURMD_NODENAME is not in the host list" >&2; exit 1; }',
              f'  exec torchrun --nnodes {hosts} --nproc-per-node "${{nprocs[$rank]}}" --node-rank "$rank" '
              f'--master-addr "$0" --master-port {RDZV_PORT} "$@"\' "$head_node_ip" "${{PROGRAM[@]}}"']
    return Export(target=f"slurm+{export.target}", text="\n".join(lines) + "\n", filename=f"{name}.sbatch",
                  warnings=export.warnings)


GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # NVIDIA GPU Feature Discovery's node label (values like NVIDIA-H100-80GB-HBM3)


def jobset_pools_manifest(spec: Spec, plan: Plan, export: Export) -> Export:
    """``--emit pytorchjob`` on several pools: a JobSet (``jobset.x-k8s.io/v1alpha2``, kubernetes-sigs/jobset; the
    API Kubeflow Trainer v2 runs on), since a Kubeflow PyTorchJob (``kubeflow.org/v1``) has one Worker pod template
    and so one node selector for all workers. One replicated Job per block of stages on one pool
    (frameworks/pool_placement.py), in rank order, each an Indexed Job of its nodes with a ``nvidia.com/gpu.product``
    node selector (a placeholder naming the pool's GPU: the label's value is the site's). Pods are reachable as
    ``<jobset>-<replicatedJob>-<job index>-<pod index>.<jobset>`` (``network.enableDNSHostnames``, the JobSet
    example jobset-with-network.yaml); node rank = the block's first node + ``JOB_COMPLETION_INDEX`` (set by
    Kubernetes in Indexed Job pods), passed to torchrun with a static rendezvous at block 0's pod 0."""
    blocks, name = rank_blocks(spec, plan), job_name(plan)
    hosts = sum(b.nodes for b in blocks)
    program = _program(export, "/parplan")
    docs: list[dict] = []
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    if export.target == "megatron":
        program += megatron_argv(spec, plan)
    else:
        program += [line for line in export.text.splitlines() if line and not line.startswith("#")]
    env = [{"name": k, "value": v} for k, v in _megatron_env(export).items()] + [{"name": "NCCL_DEBUG", "value": "WARN"}]
    head_host = f"{name}-b0-0-0.{name}"
    hints = topology_hints(spec, plan, max(b.per_node for b in blocks), hosts)
    jobs, first = [], 0
    for i, b in enumerate(blocks):
        # no "$(" in the command: the kubelet expands $(VAR) references in command and args
        launch = (f'let rank={first}+JOB_COMPLETION_INDEX; exec torchrun --nnodes {hosts} --nproc-per-node '
                  f'{b.per_node} --node-rank "$rank" --master-addr {head_host} --master-port {RDZV_PORT} "$@"')
        container = {"name": "pytorch", "image": f"{PLACEHOLDER}-image", "command": ["bash", "-c", launch, "torchrun"],
                     "args": list(program), "env": copy.deepcopy(env),
                     "resources": {"limits": {"nvidia.com/gpu": b.per_node}}, "volumeMounts": copy.deepcopy(mounts)}
        pod = {"restartPolicy": "Never", "nodeSelector": {GPU_PRODUCT_LABEL: f"{PLACEHOLDER}-{b.gpu}"},
               "containers": [container], "volumes": copy.deepcopy(volumes)}
        jobs.append({"name": f"b{i}", "replicas": 1,
                     "template": {"spec": {"completionMode": "Indexed", "completions": b.nodes, "parallelism": b.nodes,
                                           "backoffLimit": 0, "template": {
                                               "metadata": {"annotations": kueue_annotations(
                                                   hints, b.nodes, slices=slices_fit(hints, first, b.nodes))},
                                               "spec": pod}}}})
        first += b.nodes
    docs.append({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                 "metadata": {"name": name, "annotations": {"parplan/plan": plan_summary_line(plan),
                                                            **kai_annotations(hints)}},
                 "spec": {"network": {"enableDNSHostnames": True}, "replicatedJobs": jobs}})
    head = comment_block([f"JobSet ({export.target}) for '{spec.model.name}' on {cluster_words(spec)} (several "
                          f"cluster.pools) -- generated by parplan (solver-cli)",
                          "a Kubeflow PyTorchJob has one Worker template (one node selector), so each block of "
                          "stages on one pool is its own replicated Job here, in rank order; set each "
                          f"{GPU_PRODUCT_LABEL} value to that pool's label and replace {PLACEHOLDER}-*"]
                         + [f"replicated Job b{i}: {line.strip()}" for i, line in
                            enumerate(host_order_lines(spec, plan)[1:])] + [f"Kueue topology: {hints.reason()}", kai_line(hints)]
                         + [f"warning: {w}" for w in export.warnings])
    text = head + yaml.dump_all(docs, Dumper=_BlockDumper, sort_keys=False, width=1000)
    return Export(target=f"jobset+{export.target}", text=text, filename=f"{name}.yaml", warnings=export.warnings)


def emit_job(spec: Spec, plan: Plan, export: Export, launcher: str) -> Export:
    """The job file for ``launcher`` (one of :data:`LAUNCHERS`) that runs ``export``."""
    if several_pools(spec) and launcher == "slurm":
        return slurm_pools_script(spec, plan, export)
    if several_pools(spec) and launcher == "pytorchjob":
        return jobset_pools_manifest(spec, plan, export)
    if launcher == "slurm":
        return slurm_script(spec, plan, export)
    if launcher == "pytorchjob":
        return pytorchjob_manifest(spec, plan, export)
    if launcher == "volcano":
        from parplan.frameworks.jobs_volcano import volcano_job_manifest  # it builds on this module

        return volcano_job_manifest(spec, plan, export)
    raise ExportError(f"launcher {launcher!r} is unknown; known: {', '.join(LAUNCHERS)}")


__all__ = ["emit_job", "slurm_script", "slurm_pools_script", "jobset_pools_manifest", "pytorchjob_manifest", "node_layout", "job_name", "LAUNCHERS"]
