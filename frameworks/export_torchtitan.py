"""A plan as a torchtitan job TOML (``--job.config_file plan.toml``).

Target: torchtitan **v0.2.2** (commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce), the last release configured
by TOML (PR #2386 replaced it with Python configs on main; shared/reference/aesthetics-ecosystem.md B2.3).
Sources at that commit:

* section and key names: ``torchtitan/config/job_config.py`` (``Parallelism``, ``ActivationCheckpoint``,
  ``Training``, ``Model.converters``);
* the degree rule ``dp_replicate·dp_shard·cp·tp·pp == world_size`` and ``etp ∈ {1, tp}`` with EP:
  ``ParallelDims._validate`` in ``torchtitan/distributed/parallel_dims.py``;
* gradient accumulation ``global_batch_size / (local_batch_size · dp)`` and pipeline micro-batches
  ``local_batch_size / pipeline_parallel_microbatch_size``: ``torchtitan/train.py`` and the
  ``pipeline_parallel_microbatch_size`` docstring;
* the stage split ``module_fqns_per_model_part`` (one list of module names per model chunk; looped
  schedules put chunk ``r + v·pp`` on rank ``r``, V schedules chunks ``r`` and ``2pp-1-r``; multi-stage
  schedules need at least 2 chunks per rank): ``torchtitan/distributed/pipeline_parallel.py``; module
  names ``tok_embeddings``, ``layers.<i>``, ``norm``, ``output``: ``torchtitan/models/llama3/model/model.py``
  (DeepSeek-V3's model uses the same names);
* FSDP ``reshard_after_forward`` policies ("default" = not pp_enabled) and DDP only without other
  parallelism ("DDP has not supported > 1D parallelism"): ``torchtitan/models/llama3/infra/parallelize.py``,
  which also applies sequence parallelism whenever TP > 1;
* schedule names: ``torch.distributed.pipelining.schedules.get_schedule_class`` (``1F1B``,
  ``Interleaved1F1B``, ``DualPipeV``, ...).

ZeRO maps onto FSDP2: stage 3 -> ``dp_shard = dp`` with the ``default`` policy, stage 2 -> ``never``
(parameters stay gathered after forward), stage 1 has no equivalent (exported as stage 2, a warning),
stage 0 -> ``dp_replicate = dp`` (DDP), possible only when DP is the only parallelism.
"""

from __future__ import annotations

from parplan.costmodel import dualpipev
from parplan.costmodel.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.spec import Plan, Spec
from parplan.frameworks.export_common import (Export, comment_block, header_lines, model_chunk_layers,
                                              model_feature_warnings)

TORCHTITAN_VERSION = "v0.2.2"
SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "zb-h1": "1F1B", "dualpipe": "DualPipeV",
                  "dualpipev": "DualPipeV"}


def chunk_layers_for_schedule(plan: Plan, dense_layers: int = 0) -> list[int]:
    """Decoder layers per model chunk, in chunk order, as the exported schedule places them (``dense_layers``:
    an MoE model's leading dense layers, kept on stage 0 under DualPipeV as the cost model places them)."""
    if plan.schedule == "dualpipev":  # V order: rank r holds chunks r and 2pp-1-r (costmodel/dualpipev.py)
        return dualpipev.chunk_layers(list(plan.stage_layers), dense_layers)
    if plan.schedule == "dualpipe":  # not runnable as planned: each stage's layers halved into a V
        first = [n - n // 2 for n in plan.stage_layers]
        second = [n // 2 for n in plan.stage_layers]
        return first + second[::-1]
    return model_chunk_layers(plan)


def module_fqns_per_model_part(chunks: list[int]) -> list[list[str]]:
    out, start = [], 0
    for i, n in enumerate(chunks):
        names = [f"layers.{j}" for j in range(start, start + n)]
        start += n
        if i == 0:
            names.insert(0, "tok_embeddings")
        if i == len(chunks) - 1:
            names += ["norm", "output"]
        out.append(names)
    return out


def torchtitan_sections(spec: Spec, plan: Plan) -> tuple[dict[str, dict[str, object]], list[str]]:
    """``{section: {key: value}}`` in output order, and the warnings (in the order of the keys they concern)."""
    knobs = resolve_assumptions(spec.assumptions)
    warnings = model_feature_warnings(spec, "torchtitan", "the [model] name and flavor (its model args)")
    par = _data_parallel(plan, warnings)
    par.update(_tensor_and_context_parallel(plan, knobs, warnings))
    par.update(_pipeline_parallel(spec, plan, warnings))
    _moe_option_warnings(plan, warnings)
    par.update(_expert_parallel(spec, plan, warnings))
    _memory_option_warnings(plan, warnings)
    ac = _activation_checkpoint(plan, knobs, warnings)
    local_batch = plan.micro_batch_size * (plan.num_microbatches if plan.pp > 1 else 1)
    training = {"local_batch_size": local_batch, "global_batch_size": spec.training.global_batch_size,
                "seq_len": spec.training.seq_len, "mixed_precision_param": "bfloat16"}
    sections: dict[str, dict[str, object]] = {}
    if spec.training.precision == "fp8":
        sections["model"] = {"converters": ["float8"]}
    sections["parallelism"] = par
    sections["activation_checkpoint"] = ac
    sections["training"] = training
    return sections, warnings


def _data_parallel(plan: Plan, warnings: list[str]) -> dict[str, object]:
    """``[parallelism]`` data-parallel keys: DDP when DP is the sole parallelism, else FSDP2 (HSDP replicas)."""
    par: dict[str, object] = {}
    only_dp = plan.tp == plan.cp == plan.pp == 1
    if plan.zero_stage == 0 and only_dp:
        par["data_parallel_replicate_degree"] = plan.dp
        par["data_parallel_shard_degree"] = 1
    else:
        if plan.zero_stage == 0:
            warnings.append("zero_stage 0 (DDP): torchtitan runs DDP only when DP is the sole parallelism "
                            "(parallelize.py); exported as FSDP with reshard_after_forward never (ZeRO-2): less "
                            "memory, more gradient traffic than planned")
        if plan.zero_stage == 1:
            warnings.append("zero_stage 1: FSDP2 has no optimizer-only sharding; exported as FSDP with "
                            "reshard_after_forward never (ZeRO-2: gradients sharded too)")
        r = plan.zero_replicas  # HSDP: dp_replicate x dp_shard = dp (profiles.py 'titan.hsdp')
        if plan.dp % r:
            warnings.append(f"zero_replicas {r} does not divide dp {plan.dp}: torchtitan's data_parallel_replicate_"
                            f"degree x data_parallel_shard_degree must equal dp (parallel_dims.py); this file will "
                            f"not start")
        par["data_parallel_replicate_degree"] = r
        par["data_parallel_shard_degree"] = plan.dp // r if plan.dp % r == 0 else plan.dp
        par["fsdp_reshard_after_forward"] = "default" if plan.zero_stage == 3 else "never"
    return par


def _tensor_and_context_parallel(plan: Plan, knobs: Assumptions, warnings: list[str]) -> dict[str, object]:
    """``[parallelism]`` TP and CP keys (torchtitan always sequence-shards under TP; CP rotates the KV ring)."""
    par: dict[str, object] = {}
    par["tensor_parallel_degree"] = plan.tp
    if plan.tp > 1 and not plan.sequence_parallel:
        warnings.append("sequence_parallel false: torchtitan v0.2.2 always shards norms and activations along the "
                        "sequence when TP > 1 (parallelize.py); exported with sequence parallelism")
    if plan.tp > 1 and knobs.tp_comm_overlap > 0:
        warnings.append("the cost model hides part of the TP communication (assumptions.tp_comm_overlap > 0); in "
                        "torchtitan that is enable_async_tensor_parallel, which needs [compile] enable = true: not "
                        "exported")
    par["context_parallel_degree"] = plan.cp
    if plan.cp > 1:
        # v0.2.2 job_config.py:446 context_parallel_rotate_method: 'alltoall' passes the KV shards around the
        # ring (parplan's p2p), 'allgather' (its default) gathers them; torchtitan has no all-to-all over heads
        rotate = {"p2p": "alltoall", "allgather": "allgather"}.get(plan.cp_comm_type)
        if rotate is None:
            warnings.append(f"cp_comm_type {plan.cp_comm_type}: torchtitan has no all-to-all over heads (Ulysses); "
                            "exported with the KV ring (context_parallel_rotate_method alltoall), whose exposed "
                            "communication differs from the plan's")
            rotate = "alltoall"
        par["context_parallel_rotate_method"] = rotate
    return par


def _pipeline_parallel(spec: Spec, plan: Plan, warnings: list[str]) -> dict[str, object]:
    """``[parallelism]`` PP keys: the schedule, the micro-batch size and the explicit per-part module split."""
    par: dict[str, object] = {}
    par["pipeline_parallel_degree"] = plan.pp
    if plan.pp > 1:
        par["pipeline_parallel_schedule"] = SCHEDULE_NAMES[plan.schedule]
        par["pipeline_parallel_microbatch_size"] = plan.micro_batch_size
        k = spec.model.moe.first_dense_layers if spec.model.moe is not None else 0
        par["module_fqns_per_model_part"] = module_fqns_per_model_part(chunk_layers_for_schedule(plan, k))
        if plan.schedule == "zb-h1":
            warnings.append("schedule 'zb-h1': torch.distributed.pipelining's zero-bubble schedules are multi-stage "
                            "(InterleavedZeroBubble, ZBVZeroBubble need >= 2 chunks per rank); exported as 1F1B, "
                            "whose bubble is larger than planned")
        if plan.schedule == "dualpipe":
            warnings.append("schedule 'dualpipe': torchtitan cannot run DeepSeek's two-direction DualPipe (parameters "
                            "held twice; torch.distributed.pipelining has DualPipeV only); exported as DualPipeV "
                            "(two chunks per rank in V order, each stage's layers split in halves): its memory, "
                            "bubble and stage times differ from the plan; plan schedule 'dualpipev' instead")
    return par


def _moe_option_warnings(plan: Plan, warnings: list[str]) -> None:
    """MoE options torchtitan has no key for (FP8 dispatch, the EP all-to-all overlap)."""
    if plan.moe_fp8_dispatch:
        warnings.append("moe_fp8_dispatch: torchtitan's DeepEP dispatch takes use_fp8_dispatch but no config key "
                        "sets it (distributed/deepep/deepep.py); not exported: BF16 dispatch, slower than planned")
    if plan.moe_a2a_overlap:
        warnings.append("moe_a2a_overlap: torchtitan has no option overlapping the EP all-to-all with another "
                        "micro-batch outside DualPipeV (v0.2.2: pipeline_parallel_expert_parallel_overlap, DualPipeV "
                        "only); not exported: more all-to-all exposed than planned")


def _expert_parallel(spec: Spec, plan: Plan, warnings: list[str]) -> dict[str, object]:
    """``[parallelism]`` EP and ETP keys of an MoE model, with torchtitan's degree rules (parallel_dims.py)."""
    par: dict[str, object] = {}
    if spec.model.moe is not None:
        par["expert_parallel_degree"] = plan.ep
        par["expert_tensor_parallel_degree"] = plan.etp
        moe = spec.model.moe  # torchtitan@b5bcd76 torchtitan/models/common/config_utils.py:370-377: 'standard'
        # (PyTorch all-to-all), 'deepep', 'hybridep'; it has no all-gather dispatcher
        if moe.dispatcher == "flex":
            par["expert_parallel_comm_backend"] = moe.dispatcher_backend
            if moe.dispatcher_sms is not None:
                warnings.append(f"dispatcher_sms {moe.dispatcher_sms}: torchtitan's config has no SM count for its "
                                f"{moe.dispatcher_backend} backend (config_utils.py:370-377); the backend's default runs")
        elif moe.dispatcher == "allgather":
            warnings.append("dispatcher allgather: torchtitan has no all-gather token dispatcher (config_utils.py:370-377); "
                            "exported as the standard all-to-all")
        if plan.ep > 1 and plan.etp not in (1, plan.tp):
            warnings.append(f"etp = {plan.etp}: torchtitan supports only etp = 1 or etp = tp = {plan.tp} "
                            f"(parallel_dims.py); this file will not start")
        if (plan.dp * plan.cp * plan.tp) % (plan.ep * plan.etp):
            warnings.append(f"ep·etp = {plan.ep * plan.etp} must divide dp_shard·cp·tp = {plan.dp * plan.cp * plan.tp} "
                            f"(efsdp, parallel_dims.py); this file will not start")
    return par


def _memory_option_warnings(plan: Plan, warnings: list[str]) -> None:
    """Memory-side plan fields torchtitan cannot express (HSDP without shards, precision-aware or offloaded
    optimizer states, activation offload)."""
    if plan.zero_replicas > 1 and plan.zero_stage == 0:
        warnings.append(f"zero_replicas {plan.zero_replicas} with zero_stage 0: no shards to replicate; exported "
                        f"as DDP/FSDP above")
    if plan.optimizer_states is not None:
        warnings.append(f"optimizer_states {plan.optimizer_states}: torchtitan has no precision-aware optimizer "
                        f"(profiles.py 'titan.no_optimizer_offload'); the optimizer keeps fp32 states: more memory "
                        f"than planned")
    if plan.optimizer_offload_fraction > 0:
        warnings.append(f"optimizer_offload_fraction {plan.optimizer_offload_fraction:g}: torchtitan has no "
                        f"optimizer-only CPU offload (training.enable_cpu_offload moves parameters and gradients "
                        f"too); not exported: more memory than planned")
    if plan.activation_offload_layers:
        warnings.append(f"activation_offload_layers {plan.activation_offload_layers}: torchtitan's trainer has no "
                        f"activation CPU offload (profiles.py 'titan.no_activation_offload': only the experimental "
                        f"graph_trainer has one); not exported: more memory than planned")


def _activation_checkpoint(plan: Plan, knobs: Assumptions, warnings: list[str]) -> dict[str, object]:
    """``[activation_checkpoint]``: selective (per op), full (every layer) or none."""
    ac: dict[str, object] = {}
    policy = knobs.selective_recompute_policy
    if plan.recompute == "selective":
        ac["mode"], ac["selective_ac_option"] = "selective", "op"
        if policy != "alternate_matmuls":  # 'model' resolves to attention or deepseek_v3, never per-op
            warnings.append("recompute 'selective' was priced as Megatron's attention-core recompute "
                            "(assumptions.selective_recompute_policy = attention); torchtitan's per-op selective "
                            "checkpointing (selective_ac_option = op) saves every other matmul instead")
    elif plan.recompute == "full" and any(plan.recompute_layers):
        ac["mode"] = "full"
        if list(plan.recompute_layers) != list(plan.stage_layers):
            warnings.append(f"recompute_layers {plan.recompute_layers} per stage: torchtitan checkpoints every layer "
                            f"(mode full) or every n-th layer of the whole model (selective_ac_option = n), not a "
                            f"count per stage; exported as full (every layer): slower than planned, never more memory")
    else:
        ac["mode"] = "none"
    return ac


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        if value and isinstance(value[0], list):
            return "[\n" + "".join(f"    {_toml_value(v)},\n" for v in value) + "]"
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def export(spec: Spec, plan: Plan) -> Export:
    sections, warnings = torchtitan_sections(spec, plan)
    head = header_lines(spec, plan, f"torchtitan ({TORCHTITAN_VERSION}) job config", warnings)
    head += ["", "use: torchrun ... -m torchtitan.train --job.config_file <this file>",
             "yours to add: [job], [model] name/flavor/tokenizer, [optimizer], [lr_scheduler], [checkpoint], "
             f"training.dataset, training.steps (vocab size {spec.model.vocab_size})"]
    text = comment_block(head)
    for name, keys in sections.items():
        text += f"\n[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items())
    return Export(target="torchtitan", text=text, filename="torchtitan.toml", warnings=tuple(warnings))


__all__ = ["export", "torchtitan_sections", "module_fqns_per_model_part", "chunk_layers_for_schedule",
           "TORCHTITAN_VERSION", "SCHEDULE_NAMES"]
