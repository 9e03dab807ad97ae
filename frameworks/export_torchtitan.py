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

from typing import Optional

from parplan.costmodel.schedules import dualpipev
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions
from parplan.costmodel.spec.framework_rules import sequence_parallel_required
from parplan.costmodel.spec.layout import model_chunk_layers
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.export_common import (Export, comment_block, header_lines,
                                              model_family_words, model_feature_warnings)
from parplan.frameworks.profile_data import EXPORT_VERSIONS
from parplan.frameworks.profiles import export_profile

TORCHTITAN_VERSION = EXPORT_VERSIONS["torchtitan"]
SCHEDULE_NAMES = {Schedule.ONE_F_ONE_B: "1F1B", Schedule.INTERLEAVED: "Interleaved1F1B", Schedule.ZB_H1: "1F1B",
                  Schedule.DUALPIPE: "DualPipeV", Schedule.DUALPIPEV: "DualPipeV"}


# torchtitan v0.2.2's model flavours (torchtitan/models/llama3/__init__.py llama3_args, models/deepseek_v3/__init__.py
# deepseekv3_args at 73a0e697; llama3's FFN width from ffn_dim_multiplier and multiple_of, FeedForward in
# models/llama3/model/model.py): the spec's model fields each fixes. MTP: no torchtitan v0.2.2 model has it.
# (num_layers, hidden_size, ffn_hidden_size, num_attention_heads, kv_heads, vocab_size, gated_mlp, tie_embeddings, moe,
#  mla)
_DSV3_MLA = (128, 64, 128)  # qk_nope_head_dim, qk_rope_head_dim, v_head_dim of every deepseek_v3 flavour
FLAVORS: dict[tuple[str, str], tuple] = {
    ("llama3", "8B"): (32, 4096, 14336, 32, 8, 128256, True, False, None, None),
    ("llama3", "70B"): (80, 8192, 28672, 64, 8, 128256, True, False, None, None),
    ("llama3", "405B"): (126, 16384, 53248, 128, 8, 128256, True, False, None, None),
    # moe: (experts, top_k, expert width, shared experts, leading dense layers); mla: (q_lora_rank, kv_lora_rank, ...)
    ("deepseek_v3", "16B"): (27, 2048, 10944, 16, 16, 102400, True, False, (64, 6, 1408, 2, 1), (0, 512, *_DSV3_MLA)),
    ("deepseek_v3", "236B"): (60, 5120, 12288, 128, 128, 102400, True, False, (160, 6, 1536, 2, 1),
                              (1536, 512, *_DSV3_MLA)),
    ("deepseek_v3", "671B"): (61, 7168, 18432, 128, 128, 129280, True, False, (256, 8, 2048, 1, 3),
                              (1536, 512, *_DSV3_MLA)),
}


def model_flavor(spec: Spec) -> tuple[str, str] | None:
    """The torchtitan v0.2.2 ``[model] name`` and ``flavor`` whose model is the spec's (every field of
    :data:`FLAVORS` equal), or None."""
    m = spec.model
    moe = None if m.moe is None else (m.moe.num_experts, m.moe.top_k, m.moe.expert_ffn_hidden_size,
                                      m.moe.num_shared_experts, m.moe.first_dense_layers)
    mla = None if m.mla is None else (m.mla.q_lora_rank, m.mla.kv_lora_rank, m.mla.qk_nope_head_dim,
                                      m.mla.qk_rope_head_dim, m.mla.v_head_dim)
    mine = (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.kv_heads, m.vocab_size,
            m.gated_mlp, m.tie_embeddings, moe, mla)
    if m.attention is not None or (m.moe is not None and (m.moe.activation_clamp is not None or m.moe.expert_bias)):
        return None
    return next((key for key, shape in FLAVORS.items() if shape == mine), None)


def chunk_layers_for_schedule(plan: Plan, dense_layers: int = 0) -> list[int]:
    """Decoder layers per model chunk, in chunk order, as the exported schedule places them (``dense_layers``:
    an MoE model's leading dense layers, kept on stage 0 under DualPipeV as the cost model places them)."""
    if plan.schedule is Schedule.DUALPIPEV:  # V order: rank r holds chunks r and 2pp-1-r (costmodel/schedules/dualpipev.py)
        return dualpipev.chunk_layers(list(plan.stage_layers), dense_layers)
    if plan.schedule is Schedule.DUALPIPE:  # not runnable as planned: each stage's layers halved into a V
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
    flavor = model_flavor(spec)
    warnings = model_feature_warnings(spec, "torchtitan", "the [model] name and flavor (its model args)")
    if flavor is not None:  # the flavour builds the spec's model, MLA included; MTP it cannot (no v0.2.2 model has it)
        warnings = [w for w in warnings if not w.startswith("model.mla ")]
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
    model: dict[str, object] = {} if flavor is None else {"name": flavor[0], "flavor": flavor[1]}
    if spec.training.precision == "fp8":
        model["converters"] = ["float8"]
    if model:
        sections["model"] = model
    sections["parallelism"] = par
    sections["activation_checkpoint"] = ac
    sections["training"] = training
    # fused elementwise ops are what the plan is priced with (assumptions.eager_elementwise false): torch.compile
    # (v0.2.2 job_config.py:721-727, off by default) of the model and the loss
    sections["compile"] = {"enable": not knobs.eager_elementwise}
    return sections, warnings


def _data_parallel(plan: Plan, warnings: list[str]) -> dict[str, object]:
    """``[parallelism]`` data-parallel keys: DDP when DP is the sole parallelism (with one DP·CP rank, replicate and
    shard degree 1: no data-parallel wrapper at all, ZeRO-0 as the rule ``ddp_one_dimensional`` allows), else FSDP2
    (HSDP replicas)."""
    par: dict[str, object] = {}
    only_dp = plan.tp == plan.cp == plan.pp == 1 or plan.dp * plan.cp == 1
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
    # the shared rule (Profile.sequence_parallel_with_tp) at the version this file is for; runs_on applies it to a
    # spec naming torchtitan 0.2.2, not to the newer torchtitan (main: Python configs, TP without SP) it lists by default
    if sequence_parallel_required(export_profile("torchtitan"), plan) is not None:
        warnings.append("sequence_parallel false: torchtitan v0.2.2 always shards norms and activations along the "
                        "sequence when TP > 1 (parallelize.py); exported with sequence parallelism")
    if plan.tp > 1 and knobs.tp_comm_overlap > 0:
        warnings.append("the cost model hides part of the TP communication (assumptions.tp_comm_overlap > 0); in "
                        "torchtitan that is enable_async_tensor_parallel (it needs [compile] enable = true, which this "
                        "file sets unless assumptions.eager_elementwise): not exported")
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
        if plan.schedule is Schedule.ZB_H1:
            warnings.append("schedule 'zb-h1': torch.distributed.pipelining's zero-bubble schedules are multi-stage "
                            "(InterleavedZeroBubble, ZBVZeroBubble need >= 2 chunks per rank); exported as 1F1B, "
                            "whose bubble is larger than planned")
        if plan.schedule is Schedule.DUALPIPE:
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
        every = every_nth_layer(plan)
        if every is not None:  # layer SAC: v0.2.2 activation_checkpoint.py _apply_layer_sac checkpoints the blocks a
            # process-wide counter makes multiples of n: each rank recomputes (its layers) // n (profiles 'titan.layer_sac')
            ac["mode"], ac["selective_ac_option"] = "selective", str(every)
        elif list(plan.recompute_layers) != list(plan.stage_layers):
            warnings.append(f"recompute_layers {plan.recompute_layers} per stage: torchtitan checkpoints every layer "
                            f"(mode full) or every n-th layer of each rank (selective_ac_option = n), not another "
                            f"count per stage; exported as full (every layer): slower than planned, never more memory")
    else:
        ac["mode"] = "none"
    return ac


def every_nth_layer(plan: Plan) -> Optional[int]:
    """n >= 2 when the plan recomputes (layers // n) of each stage's layers but not all of them (torchtitan v0.2.2's
    ``selective_ac_option = "n"``), else None."""
    layers, done = list(plan.stage_layers), list(plan.recompute_layers)
    if done == layers:
        return None
    return next((n for n in range(2, max(layers) + 2) if [l // n for l in layers] == done), None)


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
             "yours to add: [job], " + ("[model] hf_assets_path (tokenizer)" if model_flavor(spec) else
                                          "[model] name/flavor/tokenizer (no v0.2.2 flavour is this model: "
                                          f"{model_family_words(spec)})")
             + ", [optimizer], [lr_scheduler], [checkpoint], "
             f"training.dataset, training.steps (vocab size {spec.model.vocab_size})"]
    text = comment_block(head)
    for name, keys in sections.items():
        text += f"\n[{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items())
    return Export(target="torchtitan", text=text, filename="torchtitan.toml", warnings=tuple(warnings))


__all__ = ["export", "torchtitan_sections", "module_fqns_per_model_part", "chunk_layers_for_schedule", "every_nth_layer",
           "model_flavor", "FLAVORS",
           "TORCHTITAN_VERSION", "SCHEDULE_NAMES"]
