"""The pieces every launcher's job is built from (frameworks/jobs.py: Slurm, PyTorchJob, JobSet;
frameworks/jobs_volcano.py: Volcano): the job's name and node layout, the program torchrun runs with its arguments
and environment, what every pod of a Kubernetes job holds, and the YAML dumper that keeps embedded files readable.
Pure functions of (Spec, Plan, Export)."""

from __future__ import annotations

from dataclasses import dataclass
import hashlib
import json
import shlex

import yaml

from parplan.costmodel.spec.plan_fields import plan_defaults_hidden
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.export_common import Export, ExportError
from parplan.frameworks.export_megatron import megatron_argv

RDZV_PORT = 29500
PLACEHOLDER = "REPLACE-ME"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # NVIDIA GPU Feature Discovery's node label (values like NVIDIA-H100-80GB-HBM3)


def job_name(plan: Plan) -> str:
    """``parplan-<8 hex>``: a stable name from the plan's content."""
    data = plan.model_dump(mode="json")
    for key, default in plan_defaults_hidden().items():  # the choices added later (costmodel/spec/plan_fields.py)
        if key != "pipeline_layout" and data[key] in (default, []):  # name a job only where made, so today's names
            del data[key]  # stay (the layout, None where unset, named jobs from the start)
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


def program_args(export: Export, config_dir: str) -> list[str]:
    """The training program and its arguments, as torchrun receives them."""
    if export.target == "torchtitan":
        return ["-m", "torchtitan.train", "--job.config_file", f"{config_dir}/{export.filename}"]
    if export.target == "deepspeed":
        return [PLACEHOLDER + "-train-script.py", "--deepspeed", "--deepspeed_config", f"{config_dir}/{export.filename}"]
    if export.target == "bridge":
        return ["scripts/training/run_recipe.py", "--recipe", PLACEHOLDER + "-recipe"]
    return ["pretrain_gpt.py"]


def sh_quote(token: str) -> str:
    """Quote for bash, keeping ``${VAR}`` expansions."""
    return f'"{token}"' if "$" in token else shlex.quote(token)


def megatron_env(export: Export) -> dict[str, str]:
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if "export CUDA_DEVICE_MAX_CONNECTIONS=1" in export.text else {}


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
    args = program_args(export, config_dir)
    if export.target == "megatron":
        args += megatron_argv(spec, plan)
    elif export.target == "bridge":
        args += [line for line in export.text.splitlines() if line and not line.startswith("#")]
    else:
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"},
                     "data": {export.filename: export.text}})
        mounts.append({"name": "plan-config", "mountPath": config_dir})
        volumes.append({"name": "plan-config", "configMap": {"name": f"{name}-config"}})
    env = [{"name": k, "value": v} for k, v in megatron_env(export).items()] + [{"name": "NCCL_DEBUG", "value": "WARN"}]
    return PodParts(args, env, mounts, volumes, docs)


class BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the embedded config files) as literal blocks, so the manifest stays readable."""


def _str_representer(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


BlockDumper.add_representer(str, _str_representer)
