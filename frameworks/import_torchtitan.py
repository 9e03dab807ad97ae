"""Read a torchtitan TOML (``frameworks/export_torchtitan.py``, torchtitan v0.2.2 ``JobConfig``) back into a spec:
``dp = dp_replicate·dp_shard`` (``-1`` = the leftover ranks, ``parallel_dims.py``), the stage split from
``module_fqns_per_model_part`` (looped or V order by schedule), micro-batches per step
``global_batch_size / (dp·micro-batch)``, recompute from ``[activation_checkpoint]``, ZeRO from FSDP's reshard, and
``assumptions.eager_elementwise`` unless ``[compile]`` compiles the model."""

from __future__ import annotations

import tomllib
from typing import Any

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import Spec
from parplan.frameworks.import_common import ImportPlanError, divide_exactly, spec_with

TORCHTITAN_SCHEDULES = {"1f1b": Schedule.ONE_F_ONE_B, "interleaved1f1b": Schedule.INTERLEAVED,
                        "dualpipev": Schedule.DUALPIPEV}


def spec_from_torchtitan(text: str, base: Spec) -> Spec:
    """``base`` with the plan, batch, sequence length and precision the TOML states."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ImportPlanError(f"torchtitan TOML: {err}") from None
    par, tr = doc.get("parallelism", {}), doc.get("training", {})
    tp, cp, pp = (par.get("tensor_parallel_degree", 1), par.get("context_parallel_degree", 1),
                  par.get("pipeline_parallel_degree", 1))
    replicate, shard = par.get("data_parallel_replicate_degree", 1), par.get("data_parallel_shard_degree", -1)
    if shard < 0:
        shard = divide_exactly(base.cluster.num_gpus, replicate * cp * tp * pp,
                               "parallelism: leftover ranks for dp_shard")
    dp = replicate * shard
    if replicate * shard * cp * tp * pp != base.cluster.num_gpus:
        raise ImportPlanError(f"parallelism: dp_replicate·dp_shard·cp·tp·pp = {replicate * shard * cp * tp * pp} "
                              f"must equal cluster.num_gpus = {base.cluster.num_gpus} (parallel_dims.py)")
    gbs = tr.get("global_batch_size", -1)
    local = tr.get("local_batch_size", 8)
    if gbs < 0:
        gbs = local * dp
    mbs = par.get("pipeline_parallel_microbatch_size", 1) if pp > 1 else local
    m = divide_exactly(gbs, dp * mbs, "training.global_batch_size / (dp·micro-batch)")
    plan: dict[str, Any] = {"tp": tp, "cp": cp, "pp": pp, "dp": dp, "micro_batch_size": mbs, "num_microbatches": m}
    if cp > 1:  # v0.2.2 context_parallel_rotate_method: alltoall (the ring) | allgather (its default)
        rotate = par.get("context_parallel_rotate_method", "allgather")
        kinds = {"alltoall": "p2p", "allgather": "allgather"}
        if rotate not in kinds:
            raise ImportPlanError(f"parallelism.context_parallel_rotate_method: {rotate!r} is neither alltoall nor "
                                  "allgather")
        plan["cp_comm_type"] = kinds[rotate]
    if pp > 1:
        plan.update(_pipeline(par, pp))
    plan.update(_recompute(doc.get("activation_checkpoint", {}), plan.get("stage_layers") or [base.model.num_layers]))
    plan.update(_sharding(par, shard, replicate))
    if base.model.moe is not None:
        plan["ep"] = par.get("expert_parallel_degree", 1)
        plan["etp"] = par.get("expert_tensor_parallel_degree", 1)
    converters = doc.get("model", {}).get("converters")
    training = {"global_batch_size": gbs, "precision": "fp8" if converters and "float8" in converters else "bf16"}
    if "seq_len" in tr:
        training["seq_len"] = tr["seq_len"]
    # torch.compile of the model (v0.2.2 job_config.py:721-727, off by default): fused elementwise ops, else eager
    comp = doc.get("compile", {})
    compiled = bool(comp.get("enable", False)) and "model" in comp.get("components", ["model", "loss"])
    return spec_with(base, plan=plan, training=training, assumptions={"eager_elementwise": not compiled})


def _pipeline(par: dict[str, Any], pp: int) -> dict[str, Any]:
    """The schedule, virtual stages and each rank's layers (and an uneven layout) from the model parts."""
    name = par.get("pipeline_parallel_schedule", "1F1B").lower()
    schedule = TORCHTITAN_SCHEDULES.get(name)
    if schedule is None:
        raise ImportPlanError(f"parallelism.pipeline_parallel_schedule: {name!r} has no parplan schedule "
                              f"(known: 1F1B, Interleaved1F1B, DualPipeV)")
    parts = par.get("module_fqns_per_model_part")
    if not parts:
        raise ImportPlanError("parallelism.module_fqns_per_model_part: needed to read the stage split "
                              "(torchtitan's default split is not reproduced)")
    chunks = [sum(1 for name in part if name.startswith("layers.")) for part in parts]
    per_rank = divide_exactly(len(chunks), pp, "module_fqns_per_model_part entries / pp")
    out: dict[str, Any] = {"schedule": schedule}
    if schedule is Schedule.DUALPIPEV:  # rank r holds chunks r and 2pp-1-r; a plan's stage_layers are rank totals
        out.update(vpp=1, stage_layers=[chunks[r] + chunks[2 * pp - 1 - r] for r in range(pp)])
        return out
    layout = [[chunks[v * pp + r] for v in range(per_rank)] for r in range(pp)]
    out.update(vpp=per_rank, stage_layers=[sum(stage) for stage in layout])
    if any(len(set(stage)) > 1 for stage in layout):
        out["pipeline_layout"] = layout
    return out


def _recompute(ac: dict[str, Any], stage_layers: list[int]) -> dict[str, Any]:
    """``[activation_checkpoint]`` as the plan's recompute: full, op-level selective, or layer SAC (every n-th
    block of each rank, a process-wide counter in v0.2.2 ``_apply_layer_sac``: (the rank's layers) // n)."""
    mode = ac.get("mode", "selective")
    if mode == "full":
        return {"recompute": "full"}
    if mode == "none":
        return {}
    if mode != "selective":
        raise ImportPlanError(f"activation_checkpoint.mode: {mode!r} has no plan form")
    option = str(ac.get("selective_ac_option", "2"))
    if option.isdigit() and int(option) >= 1:
        n = int(option)
        return {"recompute": "full", "recompute_layers": [layers // n for layers in stage_layers]}
    if option != "op":
        raise ImportPlanError(f"activation_checkpoint.selective_ac_option: {option!r} is neither 'op' nor a "
                              "layer count")
    return {"recompute": "selective"}


def _sharding(par: dict[str, Any], shard: int, replicate: int) -> dict[str, Any]:
    """FSDP2 as ZeRO: none without sharding, else 2 (reshard never) or 3; HSDP replicas over dp_replicate (FSDP
    over dp_shard x cp, profiles 'titan.hsdp')."""
    reshard = par.get("fsdp_reshard_after_forward")
    if reshard is None and shard == 1:
        return {"zero_stage": 0}
    out: dict[str, Any] = {"zero_stage": 2 if reshard == "never" else 3}
    if replicate > 1:
        out["zero_replicas"] = replicate
    return out
