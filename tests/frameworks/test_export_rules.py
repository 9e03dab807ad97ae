"""The torchtitan TOML, the DeepSpeed JSON and the job files obey their framework's rules.

* torchtitan v0.2.2: the TOML parses (tomllib); ``dp_replicate·dp_shard·cp·tp·pp == world_size`` and, with
  EP, ``etp ∈ {1, tp}`` (``ParallelDims._validate``, torchtitan/distributed/parallel_dims.py); a single-stage
  schedule has one chunk per rank, a looped one at least two (torchtitan/distributed/pipeline_parallel.py);
  every decoder layer appears once, in order; ``global_batch_size % (local_batch_size·dp) == 0`` and the
  local batch splits into pipeline micro-batches (torchtitan/train.py);
* DeepSpeed 0.19.6: ``train_batch_size == train_micro_batch_size_per_gpu × gradient_accumulation_steps ×
  DP`` (``DeepSpeedConfig._batch_assertion``); only keys of the pinned version (B2.4 of
  shared/reference/aesthetics-ecosystem.md); no ZeRO-2/3 under pipeline parallelism (pipe/engine.py);
* jobs: nodes × processes per node = tp·cp·pp·dp; the embedded config equals the export.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib

import pytest
import yaml

from tests.export_cases import CASE_NAMES, load_case
from parplan.costmodel.schedules.schedule import Schedule
from parplan.frameworks.export import export_plan
from parplan.frameworks.export_common import ExportError
from parplan.frameworks.export_megatron import megatron_argv
from parplan.frameworks.jobs import emit_job, node_layout

SINGLE_STAGE = {"1F1B", "GPipe"}
DEEPSPEED_KEYS = {
    None: {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16",
           "zero_optimization", "pipeline", "tensor_parallel", "activation_checkpointing", "gradient_clipping"},
    "bf16": {"enabled"},
    "zero_optimization": {"stage", "overlap_comm", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
                          "allgather_bucket_size", "offload_optimizer", "stage3_prefetch_bucket_size",
                          "stage3_param_persistence_threshold", "stage3_max_live_parameters", "zero_hpz_partition_size"},
    "pipeline": {"stages", "partition", "seed_layers", "activation_checkpoint_interval", "pipe_partitioned",
                 "grad_partitioned"},
    "tensor_parallel": {"autotp_size"},
    "activation_checkpointing": {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
                                 "number_checkpoints", "synchronize_checkpoint_boundary", "profile"},
}


def torchtitan_violations(doc: dict, world_size: int, num_layers: int) -> list[str]:
    par, tr = doc["parallelism"], doc["training"]
    out = []
    rep, shard = par.get("data_parallel_replicate_degree", 1), par.get("data_parallel_shard_degree", -1)
    tp, cp, pp = par.get("tensor_parallel_degree", 1), par.get("context_parallel_degree", 1), par.get("pipeline_parallel_degree", 1)
    if shard < 0:
        shard = world_size // (rep * cp * tp * pp)
    if rep * shard * cp * tp * pp != world_size:
        out.append("dp_replicate*dp_shard*cp*tp*pp != world_size")
    ep, etp = par.get("expert_parallel_degree", 1), par.get("expert_tensor_parallel_degree", 1)
    if ep > 1 and etp not in (1, tp):
        out.append("etp must be 1 or tp")
    if ep > 1 and (shard * cp * tp) % (ep * etp):
        out.append("efsdp not integral")
    dp = rep * shard
    local, gbs = tr["local_batch_size"], tr["global_batch_size"]
    if gbs % (local * dp):
        out.append("global batch not divisible by local batch * dp")
    if pp > 1:
        if local % par.get("pipeline_parallel_microbatch_size", 1):
            out.append("local batch not divisible by pipeline micro-batch")
        parts = par["module_fqns_per_model_part"]
        per_rank, rem = divmod(len(parts), pp)
        schedule = par.get("pipeline_parallel_schedule", "1F1B")
        if rem or (schedule in SINGLE_STAGE and per_rank != 1) or (schedule not in SINGLE_STAGE and per_rank < 2):
            out.append(f"{len(parts)} model parts do not fit schedule {schedule} on {pp} ranks")
        names = [n for part in parts for n in part]
        if [n for n in names if n.startswith("layers.")] != [f"layers.{i}" for i in range(num_layers)]:
            out.append("decoder layers not each once and in order")
        if names[0] != "tok_embeddings" or names[-2:] != ["norm", "output"]:
            out.append("embedding/head not at the ends")
    if tr["seq_len"] % (tp * 2 * cp) and cp > 1:
        out.append("seq_len not divisible by tp*2cp")
    return out


def deepspeed_violations(cfg: dict, dp: int) -> list[str]:
    """``dp``: the ranks DeepSpeedConfig counts as data parallel (DeepSpeed edaa7221 runtime/config.py:711-722):
    without pipeline parallelism every rank over sequence_parallel_size (AutoTP's counted), with it the
    topology's data axis."""
    out = []
    if cfg["train_batch_size"] != cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp:
        out.append("train_batch_size != micro * accumulation * dp")
    for key, value in cfg.items():
        if key not in DEEPSPEED_KEYS[None]:
            out.append(f"unknown key {key}")
        elif isinstance(value, dict):
            out += [f"unknown key {key}.{k}" for k in value if k not in DEEPSPEED_KEYS[key]]
    if cfg.get("pipeline", {}).get("stages", 1) > 1 and cfg["zero_optimization"]["stage"] >= 2:
        out.append("ZeRO-2/3 with pipeline parallelism")
    return out


@pytest.mark.parametrize("case", CASE_NAMES)
def test_torchtitan_toml_parses_and_satisfies_the_degree_rule(case):
    spec, plan = load_case(case)
    doc = tomllib.loads(export_plan(spec, plan, "torchtitan").text)
    assert torchtitan_violations(doc, spec.cluster.num_gpus, spec.model.num_layers) == []


def test_torchtitan_rules_can_fail():
    spec, plan = load_case("llama3-70b-interleaved")
    doc = tomllib.loads(export_plan(spec, plan, "torchtitan").text)
    assert torchtitan_violations(doc, 2 * spec.cluster.num_gpus, spec.model.num_layers)
    doc["parallelism"]["module_fqns_per_model_part"] = doc["parallelism"]["module_fqns_per_model_part"][:4]
    assert torchtitan_violations(doc, spec.cluster.num_gpus, spec.model.num_layers)


def test_torchtitan_dualpipe_is_two_chunks_per_rank_in_v_order():
    spec, plan = load_case("llama3-70b-uneven-block")
    p = plan.model_copy(update={"schedule": Schedule.DUALPIPE})
    doc = tomllib.loads(export_plan(spec, p, "torchtitan").text)
    par = doc["parallelism"]
    assert par["pipeline_parallel_schedule"] == "DualPipeV"
    sizes = [sum(n.startswith("layers.") for n in part) for part in par["module_fqns_per_model_part"]]
    assert [sizes[r] + sizes[2 * p.pp - 1 - r] for r in range(p.pp)] == p.stage_layers


@pytest.mark.parametrize("case", CASE_NAMES)
def test_deepspeed_json_satisfies_the_batch_rule_and_known_keys(case):
    spec, plan = load_case(case)
    cfg = json.loads(export_plan(spec, plan, "deepspeed").text)
    assert deepspeed_violations(cfg, deepspeed_ranks(plan, spec.cluster.num_gpus, cfg)) == []


def deepspeed_ranks(plan, world: int, cfg: dict) -> int:
    """What DeepSpeedConfig's world_size is for this config (no mpu at pp 1; the pipeline grid's data axis with
    PipeModelDataParallelTopology(pp, tp, dp) otherwise), from the world size, not from the exporter."""
    if plan.pp == 1:
        return world // cfg.get("sequence_parallel_size", 1)
    return world // (plan.pp * plan.tp)


@pytest.mark.parametrize("update", [dict(tp=8, dp=2), dict(tp=2, dp=8), dict(tp=4, pp=1, dp=16), dict(tp=1, pp=1, dp=64)])
def test_deepspeed_batch_counts_ranks_as_deepspeed_does(update):
    """Issue 24.7: train_batch_size counted DP only, while deepspeed.initialize without an mpu counts the AutoTP
    ranks too (`512 != 2 * 8 * 64`). Now the batch rule holds with DeepSpeed's own count."""
    spec, plan = load_case("llama3-70b-interleaved")
    base = dict(schedule=Schedule.ONE_F_ONE_B, vpp=1, zero_stage=1, recompute="none")
    p = plan.model_copy(update={**base, **update})
    if p.pp != plan.pp:
        p = p.model_copy(update={"stage_layers": [spec.model.num_layers], "recompute_layers": [0]})
    p = p.model_copy(update={"num_microbatches": spec.training.global_batch_size // (p.micro_batch_size * p.dp)})
    assert p.num_gpus == spec.cluster.num_gpus
    export = export_plan(spec, p, "deepspeed")
    cfg = json.loads(export.text)
    assert deepspeed_violations(cfg, deepspeed_ranks(p, spec.cluster.num_gpus, cfg)) == []
    assert (cfg["train_batch_size"] == spec.training.global_batch_size) == (p.pp > 1 or p.tp == 1)


def test_deepspeed_refuses_zero3_under_pipeline_parallelism():
    spec, plan = load_case("llama3-70b-uneven-block")
    export = export_plan(spec, plan.model_copy(update={"zero_stage": 3}), "deepspeed")
    cfg = json.loads(export.text)
    assert cfg["zero_optimization"]["stage"] == 1
    assert any("refuses ZeRO-2/3" in w for w in export.warnings)
    cfg["zero_optimization"]["stage"] = 3
    ranks = deepspeed_ranks(plan, spec.cluster.num_gpus, cfg)
    assert deepspeed_violations(cfg, ranks) == ["ZeRO-2/3 with pipeline parallelism"]
    cfg["train_batch_size"] += 1
    assert "train_batch_size != micro * accumulation * dp" in deepspeed_violations(cfg, ranks)


@pytest.mark.parametrize("case", CASE_NAMES)
def test_jobs_launch_the_plan_world_size_and_embed_the_export(case):
    spec, plan = load_case(case)
    nodes, per_node = node_layout(spec, plan)
    assert nodes * per_node == plan.num_gpus
    for target in ("megatron", "torchtitan", "deepspeed"):
        export = export_plan(spec, plan, target)
        script = emit_job(spec, plan, export, "slurm").text
        assert f"#SBATCH --nodes={nodes}\n" in script and f"--nproc-per-node {per_node} " in script
        if target != "megatron":
            body = re.search(r"<<'PARPLAN_EOF'\n(.*?)\nPARPLAN_EOF", script, re.S).group(1)
            assert body + "\n" == export.text
        docs = list(yaml.safe_load_all(emit_job(spec, plan, export, "pytorchjob").text))
        job = docs[-1]
        replicas = job["spec"]["pytorchReplicaSpecs"]
        assert sum(r["replicas"] for r in replicas.values()) == nodes
        assert job["spec"]["nprocPerNode"] == str(per_node)
        container = replicas["Master"]["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"
        if target == "megatron":
            assert container["args"][1:] == megatron_argv(spec, plan)
        else:
            assert docs[0]["data"][export.filename] == export.text


def test_a_world_size_that_is_not_whole_nodes_is_refused():
    spec, plan = load_case("gpt-1.7b-ddp")
    odd = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"num_gpus": 12})})
    with pytest.raises(ExportError, match="whole number"):
        node_layout(odd, plan.model_copy(update={"dp": 12, "num_microbatches": 1}))


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to check the scripts' syntax")
@pytest.mark.parametrize("case", CASE_NAMES)
def test_megatron_arguments_and_sbatch_scripts_are_valid_bash(case, tmp_path):
    spec, plan = load_case(case)
    export = export_plan(spec, plan, "megatron")
    for name, text in (("args.sh", export.text), ("job.sbatch", emit_job(spec, plan, export, "slurm").text)):
        path = tmp_path / name
        path.write_text(text)
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    expanded = subprocess.run(["bash", "-c", f'source "{tmp_path / "args.sh"}"; printf "%s\\n" "${{MEGATRON_ARGS[@]}}"'],
                              capture_output=True, text=True)
    assert expanded.stdout.split("\n")[:-1] == megatron_argv(spec, plan)
