"""A plan as a DeepSpeed config JSON (``deepspeed.initialize(config=...)``).

Target: DeepSpeed **0.19.6**. Only keys that version reads are written (shared/reference/
aesthetics-ecosystem.md B2.4; sources in the DeepSpeed repository at v0.19.6):

* ``train_batch_size``, ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``bf16``:
  ``deepspeed/runtime/constants.py``; the invariant ``train_batch_size == micro × accumulation × DP``
  is ``DeepSpeedConfig._batch_assertion`` (``deepspeed/runtime/config.py``), DP being the data-parallel
  world size;
* ``zero_optimization.stage`` / ``overlap_comm``: ``deepspeed/runtime/zero/config.py`` (a pydantic model
  with extra="forbid": no other key is written); ZeRO-2/3 with pipeline parallelism is refused by
  ``PipelineEngine.__init__`` ("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism",
  ``deepspeed/runtime/pipe/engine.py``);
* ``pipeline.stages`` / ``pipeline.activation_checkpoint_interval``: ``get_pipeline_config`` in
  ``deepspeed/runtime/config.py`` (the stage count the engine uses is ``PipelineModule(num_stages=...)``
  in model code; ``stages`` records it);
* ``tensor_parallel.autotp_size``: ``deepspeed/runtime/tensor_parallel/config.py`` (AutoTP);
* ``activation_checkpointing``: ``deepspeed/runtime/activation_checkpointing/config.py`` (configures
  ``deepspeed.checkpointing.checkpoint``; which layers call it is model code).

What lives in model code rather than the JSON (pipeline partition, expert parallelism, ring context
parallelism, which layers recompute) is listed in the warnings.
"""

from __future__ import annotations

import json

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.framework_rules import Profile, context_parallel_beside_pipeline
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.export_common import Export, global_batch_size, model_family_words, model_feature_warnings
from parplan.frameworks.profile_data import EXPORT_VERSIONS
from parplan.frameworks.profiles import export_profile

DEEPSPEED_VERSION = EXPORT_VERSIONS["deepspeed"]


def deepspeed_profile() -> Profile:
    """The DeepSpeed profile whose rules (costmodel/spec/framework_rules.py, the ones ``runs_on`` applies) decide what
    this export refuses or changes."""
    return export_profile("deepspeed")


def deepspeed_dp_ranks(plan: Plan) -> tuple[int, str]:
    """The ranks ``DeepSpeedConfig._batch_assertion`` counts as data-parallel for this export (its
    ``train_batch_size == micro × accumulation × world_size``, runtime/config.py:937 at DeepSpeed edaa7221 =
    0.19.6), and why. ``world_size`` there (config.py:711-722) is, with the pipeline engine's mpu
    (``deepspeed.initialize`` passes ``model.mpu()`` for a PipelineModule, deepspeed/__init__.py:242-244),
    its data axis: world / (pp·tp) with the PipeModelDataParallelTopology the export asks for; without an mpu
    (pp 1, AutoTP) every rank, divided by ``sequence_parallel_size`` when the config has it: dp·tp."""
    if context_parallel_beside_pipeline(deepspeed_profile(), plan) is not None:
        # no Ulysses under the pipeline engine: the cp ranks run as data parallel (refused, _parallel_code_notes)
        return plan.dp * plan.cp, "the pipeline topology's data axis, the cp ranks included"
    if plan.pp > 1:
        return plan.dp, "the pipeline topology's data axis"
    if plan.cp > 1 and plan.cp_comm_type != "a2a":  # not exported as Ulysses: the cp ranks run as data parallel
        return plan.dp * plan.tp * plan.cp, "deepspeed.initialize without an mpu counts every rank"
    if plan.tp > 1:
        return plan.dp * plan.tp, ("deepspeed.initialize without an mpu counts every rank (AutoTP's included) but "
                                   "the Ulysses ranks (sequence_parallel_size)" if plan.cp > 1
                                   else "deepspeed.initialize without an mpu counts every rank, AutoTP's included")
    return plan.dp, "every rank"


def deepspeed_config(spec: Spec, plan: Plan) -> tuple[dict, list[str]]:
    """The config dict and the warnings."""
    knobs = resolve_assumptions(spec.assumptions)
    warnings: list[str] = model_feature_warnings(spec, "DeepSpeed", "the model code (the config JSON has no model)")
    warnings.append(f"code: the config JSON has no model; the model code builds the one priced: "
                    f"{model_family_words(spec)}")
    counted, why = deepspeed_dp_ranks(plan)
    cfg: dict = {
        "train_batch_size": plan.micro_batch_size * plan.num_microbatches * counted,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.num_microbatches,
        "bf16": {"enabled": True},
    }
    if spec.training.precision == "fp8":
        warnings.append("FP8 training has no DeepSpeed config key (Transformer Engine layers in model code); "
                        "exported as bf16")
    for name, what in (("moe_fp8_dispatch", "FP8 expert dispatch"), ("moe_a2a_overlap", "EP all-to-all overlap")):
        # DeepSpeed@edaa7221 deepspeed/moe/sharded_moe.py:97-109, 720, 749: _AllToAll is dist.all_to_all_single of
        # the activations in their own dtype, dispatch and combine in the layer's forward, no micro-batch pairing
        if getattr(plan, name):
            warnings.append(f"{name}: DeepSpeed's MoE layer has no {what}; not exported (slower than planned)")
    zero = plan.zero_stage
    if plan.pp > 1 and zero >= 2:
        warnings.append(f"zero_stage {zero} with pp = {plan.pp}: DeepSpeed's PipelineEngine refuses ZeRO-2/3 "
                        f"(pipe/engine.py); exported as stage 1: more memory than planned")
        zero = 1
    cfg["zero_optimization"] = {"stage": zero, "overlap_comm": plan.dp > 1 and knobs.dp_comm_overlap > 0}
    _memory_dims(plan, zero, cfg["zero_optimization"], warnings)

    _recompute_and_pipeline(plan, cfg, warnings)
    if counted != plan.dp:
        warnings.append(f"train_batch_size {cfg['train_batch_size']} = micro-batch {plan.micro_batch_size} x "
                        f"{plan.num_microbatches} accumulation steps x {counted} ranks DeepSpeed counts as data "
                        f"parallel ({why}); the plan's sequences per step are {global_batch_size(plan)} over dp = "
                        f"{plan.dp}")
    _parallel_code_notes(spec, plan, cfg, warnings)
    return cfg, warnings


def _recompute_and_pipeline(plan: Plan, cfg: dict, warnings: list[str]) -> None:
    """Recompute (DeepSpeed checkpoints every n-th layer alike), the pipeline section and TP (AutoTP)."""
    full_every_layer = plan.recompute == "full" and list(plan.recompute_layers) == list(plan.stage_layers)
    some_recompute = plan.recompute == "full" and any(plan.recompute_layers)
    if plan.recompute == "selective":
        warnings.append("recompute 'selective': DeepSpeed has no selective (attention-only) recompute; exported as "
                        "no recompute")
    if some_recompute and not full_every_layer:
        warnings.append(f"recompute_layers {plan.recompute_layers} per stage: DeepSpeed checkpoints every n-th "
                        f"layer of every stage alike (pipeline.activation_checkpoint_interval); exported as every "
                        f"layer: slower than planned, never more memory")
    if plan.pp > 1:
        cfg["pipeline"] = {"stages": plan.pp, "activation_checkpoint_interval": 1 if some_recompute else 0}
        warnings.append(f"code: the stage count is PipelineModule(num_stages={plan.pp}, ...) in model code "
                        f"(pipeline.stages records it)")
        if len(set(plan.stage_layers)) > 1:
            warnings.append(f"stage_layers {plan.stage_layers}: PipelineModule's partition_method ('uniform', "
                            f"'parameters', 'type:<regex>') balances layers or parameters; it cannot place a given "
                            f"number of layers on each stage")
        if plan.schedule is not Schedule.ONE_F_ONE_B or plan.vpp > 1:
            warnings.append(f"schedule '{plan.schedule}' (vpp {plan.vpp}): DeepSpeed's PipelineEngine runs only its "
                            f"own 1F1B TrainSchedule (pipe/schedule.py); exported as 1F1B, larger bubble than planned")
    elif some_recompute:
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False, "number_checkpoints": None}
        warnings.append("code: without pipeline parallelism each transformer layer must call "
                        "deepspeed.checkpointing.checkpoint in model code; the activation_checkpointing section only "
                        "configures it")
    if plan.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": plan.tp}
        warnings.append(f"code: TP = {plan.tp} is written for AutoTP (tensor_parallel.autotp_size); with "
                        f"Megatron-DeepSpeed it is the mpu's --tensor-model-parallel-size instead")
        if plan.sequence_parallel:
            warnings.append("sequence_parallel: AutoTP has no Megatron-style sequence parallelism; activations are "
                            "replicated across the TP group (more memory than planned)")


def _parallel_code_notes(spec: Spec, plan: Plan, cfg: dict, warnings: list[str]) -> None:
    """What TP x PP, CP and EP need in model code (no config key expresses them), and Ulysses for CP a2a."""
    if plan.pp > 1 and plan.tp > 1:
        warnings.append(f"code: pass PipelineModule(..., topology=PipeModelDataParallelTopology(num_pp={plan.pp}, "
                        f"num_mp={plan.tp}, num_dp={plan.dp * plan.cp})) (deepspeed/runtime/pipe/topology.py:244-249): "
                        f"with num_stages alone the TP ranks are data-parallel ranks (pipe/module.py:173-180)")
    if context_parallel_beside_pipeline(deepspeed_profile(), plan) is not None:  # runs_on's rule (Profile.
        # context_parallel_with_pp): such a plan is not listed for DeepSpeed nor returned by its search
        warnings.append(f"DeepSpeed cannot run cp = {plan.cp} with pp = {plan.pp}: the PipelineModule topology has "
                        f"pipe, data and model axes only (deepspeed/runtime/pipe/topology.py:232-249) and the "
                        f"engine's batch rule takes its data axis (runtime/config.py:711-716), so there is no "
                        f"Ulysses group; refused: exported with the cp ranks as data-parallel ranks")
    elif plan.cp > 1 and plan.cp_comm_type == "a2a":
        # DeepSpeed-Ulysses (deepspeed/runtime/config.py:721-722; runtime/sequence_parallel/ulysses_sp.py)
        cfg["sequence_parallel_size"] = plan.cp
        warnings.append(f"code: cp = {plan.cp} is DeepSpeed-Ulysses; the model's attention must be wrapped "
                        "(deepspeed.runtime.sequence_parallel.ulysses_sp.UlyssesSPAttentionHF.register_with_"
                        "transformers, or deepspeed.sequence.layer.DistributedAttention)")
    elif plan.cp > 1:
        warnings.append(f"cp = {plan.cp} with cp_comm_type {plan.cp_comm_type}: DeepSpeed's sequence parallelism "
                        "is Ulysses (all-to-all over heads, cp_comm_type a2a), not ring context parallelism; "
                        "not exported")
    if spec.model.moe is not None and (plan.ep > 1 or plan.etp > 1):
        # moe/layer.py:38-60, 91-100: enable_expert_tensor_parallelism shards the experts over the mpu's TP group
        sharded = ", enable_expert_tensor_parallelism=True" if plan.etp > 1 else ""
        warnings.append(f"code: expert parallelism (ep = {plan.ep}, etp = {plan.etp}) is deepspeed.moe.layer.MoE("
                        f"ep_size={plan.ep}{sharded}) in model code, not a config key")
        if plan.etp not in (1, plan.tp):
            warnings.append(f"etp = {plan.etp}: DeepSpeed shards the experts over the whole TP group (etp = tp = "
                            f"{plan.tp}) or not at all; exported as etp = tp")


def _memory_dims(plan: Plan, zero: int, z: dict, warnings: list[str]) -> None:
    """HSDP as MiCS (``mics_shard_size``, a ZeRO-3 partitioner), optimizer offload as ZeRO-Offload
    (``offload_optimizer: {device: cpu, ratio}``); profiles.py 'deepspeed.mics', 'deepspeed.offload',
    'deepspeed.bf16_states'."""
    if plan.zero_replicas > 1:
        shard = plan.dp * plan.cp // plan.zero_replicas
        if zero == 3:
            z["mics_shard_size"] = shard
        else:
            warnings.append(f"zero_replicas {plan.zero_replicas}: DeepSpeed's hybrid sharding (MiCS, "
                            f"mics_shard_size) is ZeRO-3 only (got stage {zero}); not exported: more memory than "
                            f"planned")
    if plan.optimizer_states is not None:
        warnings.append(f"optimizer_states {plan.optimizer_states}: DeepSpeed has no per-moment optimizer dtypes "
                        f"(bf16_optimizer_states also makes master weights and gradients bf16); not exported: "
                        f"more memory than planned")
    if plan.activation_offload_layers:
        warnings.append(f"activation_offload_layers {plan.activation_offload_layers}: DeepSpeed has no offload of the "
                        f"saved activations of layers that are not recomputed (activation_checkpointing."
                        f"cpu_checkpointing offloads checkpointed inputs and needs checkpointing: profiles.py "
                        f"'deepspeed.no_activation_offload'); not exported: more memory than planned")
    f = plan.optimizer_offload_fraction
    if f > 0:
        if zero == 0:
            warnings.append("optimizer offload needs ZeRO-1, 2 or 3 (offload_config.py); not exported")
            return
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if f < 1:
            if zero == 3:
                z["offload_optimizer"]["ratio"] = f
            else:
                warnings.append(f"optimizer_offload_fraction {f:g}: DeepSpeed's offload ratio is ZeRO-3 only; "
                                f"exported as a full offload (ratio 1): slower than planned")


def export(spec: Spec, plan: Plan) -> Export:
    cfg, warnings = deepspeed_config(spec, plan)
    return Export(target="deepspeed", text=json.dumps(cfg, indent=2) + "\n", filename="ds_config.json",
                  warnings=tuple(warnings))


__all__ = ["deepspeed_dp_ranks", "export", "deepspeed_config", "DEEPSPEED_VERSION"]
