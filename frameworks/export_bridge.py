"""A plan as Megatron-Bridge ``ConfigContainer`` overrides (``key=value``, one per line).

Target: Megatron-Bridge 0.7.0 (NVIDIA-NeMo/Megatron-Bridge). ``scripts/training/run_recipe.py --recipe
<recipe>`` takes Hydra/OmegaConf overrides of the container's groups (``model.*``, ``train.*``, ``ddp.*``,
``optimizer.*``); the key names are those of the repository's Megatron-LM -> Bridge mapping,
``docs/megatron-lm-to-megatron-bridge.md`` and ``scripts/translate_mlm_to_bridge.py``, as quoted in
shared/reference/aesthetics-ecosystem.md B2.2. The decisions (pipeline split, recompute, ZeRO) are
Megatron-Core's and are shared with the Megatron-LM exporter (frameworks/export_megatron.py):

* ``--num-layers-per-virtual-pipeline-stage`` has no Bridge key; Bridge takes the chunk count,
  ``model.virtual_pipeline_model_parallel_size``;
* ``--use-distributed-optimizer`` is two keys kept in sync, ``ddp.use_distributed_optimizer`` and
  ``optimizer.use_distributed_optimizer``;
* ZeRO-2/3 (Megatron-FSDP) and ``--tp-comm-overlap`` (Bridge's ``comm_overlap.*`` group) have no key in
  the verified mapping: warnings;
* HSDP, the precision-aware optimizer and optimizer CPU offload: the ``ddp`` and ``optimizer`` groups are
  Megatron-Core's ``DistributedDataParallelConfig`` and ``OptimizerConfig``, whose fields carry the flags'
  names (Megatron-LM d98e8a64 megatron/core/distributed/distributed_data_parallel_config.py:34
  ``num_distributed_optimizer_instances``; megatron/core/optimizer/optimizer_config.py:187
  ``use_precision_aware_optimizer``, 347-356 ``optimizer_cpu_offload``, ``optimizer_offload_fraction``,
  ``overlap_cpu_optimizer_d2h_h2d``); the three dtype fields (200-206) are ``torch.dtype`` values with no
  verified override syntax: a warning names them.
* activation CPU offload: ``model.cpu_offloading``, ``model.cpu_offloading_weights`` and
  ``model.cpu_offloading_num_layers``, the keys the performance recipes set (Megatron-Bridge 067f987d
  src/megatron/bridge/perf_recipes/llama/gb200/llama3.py:282-284).

The model shape comes from the recipe (a model provider); it is not overridden here.
"""

from __future__ import annotations

from parplan.costmodel.spec import Plan, Spec
from parplan.frameworks.export_common import Export, comment_block, header_lines
from parplan.frameworks.export_megatron import megatron_settings

BRIDGE_VERSION = "0.7.0"


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"' if "|" in value or "*" in value else value
    return str(value)


def bridge_overrides(spec: Spec, plan: Plan) -> tuple[list[tuple[str, object]], list[str]]:
    """``[(key, value)]`` overrides and the warnings."""
    s = megatron_settings(spec, plan)
    warnings = list(s.warnings)
    out: list[tuple[str, object]] = [
        ("model.tensor_model_parallel_size", s.tp),
        ("model.pipeline_model_parallel_size", s.pp),
        ("model.context_parallel_size", s.cp),
    ]
    if s.cp_comm_type is not None:  # Megatron-Core TransformerConfig.cp_comm_type
        out.append(("model.cp_comm_type", s.cp_comm_type))
    if s.hierarchical_cp_sizes is not None:
        out.append(("model.hierarchical_context_parallel_sizes", list(s.hierarchical_cp_sizes)))
    if s.ep is not None:
        out += [("model.expert_model_parallel_size", s.ep), ("model.expert_tensor_parallel_size", s.etp)]
    if plan.vpp > 1 and s.layout is None:
        out.append(("model.virtual_pipeline_model_parallel_size", plan.vpp))
    if s.first_stage_layers is not None:
        out += [("model.num_layers_in_first_pipeline_stage", s.first_stage_layers),
                ("model.num_layers_in_last_pipeline_stage", s.last_stage_layers)]
    if s.layout is not None:
        out.append(("model.pipeline_model_parallel_layout", s.layout))
    out.append(("model.sequence_parallel", s.sequence_parallel))
    if s.recompute_granularity is not None:
        out.append(("model.recompute_granularity", s.recompute_granularity))
    if s.recompute_method is not None:
        out += [("model.recompute_method", s.recompute_method), ("model.recompute_num_layers", s.recompute_num_layers)]
    out += [("train.micro_batch_size", s.micro_batch_size), ("train.global_batch_size", s.global_batch_size)]
    if s.fsdp_sharding_strategy is not None:
        warnings.append(f"zero_stage {plan.zero_stage} (Megatron-FSDP, {s.fsdp_sharding_strategy}) has no key in the "
                        f"verified Megatron-Bridge mapping; exported as the distributed optimizer (ZeRO-1): more "
                        f"memory than planned")
    distributed = s.distributed_optimizer or s.fsdp_sharding_strategy is not None
    out += [("ddp.use_distributed_optimizer", distributed), ("optimizer.use_distributed_optimizer", distributed)]
    out += [("ddp.overlap_grad_reduce", s.overlap_grad_reduce), ("ddp.overlap_param_gather", s.overlap_param_gather)]
    if s.num_distributed_optimizer_instances is not None:
        out.append(("ddp.num_distributed_optimizer_instances", s.num_distributed_optimizer_instances))
    if s.optimizer_dtypes is not None:
        out.append(("optimizer.use_precision_aware_optimizer", True))
        main, m1, m2 = s.optimizer_dtypes
        torch_name = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "uint8"}
        warnings.append(f"precision-aware optimizer states {main}/{m1}/{m2}: set optimizer.main_params_dtype = "
                        f"torch.{torch_name[main]}, optimizer.exp_avg_dtype = torch.{torch_name[m1]} and "
                        f"optimizer.exp_avg_sq_dtype = torch.{torch_name[m2]} in the recipe (torch.dtype fields; "
                        f"Megatron-Core maps fp8 to torch.uint8)")
    if s.optimizer_offload_fraction is not None:
        out += [("optimizer.optimizer_cpu_offload", True),
                ("optimizer.optimizer_offload_fraction", s.optimizer_offload_fraction),
                ("optimizer.overlap_cpu_optimizer_d2h_h2d", s.overlap_cpu_optimizer_d2h_h2d)]
    if s.cpu_offloading_num_layers is not None:  # the recipes' own keys (profiles.py 'bridge.activation_offload')
        out += [("model.cpu_offloading", True), ("model.cpu_offloading_weights", False),
                ("model.cpu_offloading_num_layers", s.cpu_offloading_num_layers)]
    if s.overlap_moe_expert_parallel_comm:  # Megatron-Bridge CommOverlapConfig.overlap_moe_expert_parallel_comm
        out.append(("comm_overlap.overlap_moe_expert_parallel_comm", True))
    if s.tp_comm_overlap:
        warnings.append("TP communication overlap: Megatron-Bridge configures it in the comm_overlap group of its "
                        "recipes (no single verified key); set it in the recipe")
    if spec.training.precision == "fp8":
        warnings.append("FP8 training: choose the recipe's FP8 mixed-precision config (mixed_precision group); "
                        "no single verified key")
    return out, warnings


def export(spec: Spec, plan: Plan) -> Export:
    overrides, warnings = bridge_overrides(spec, plan)
    head = header_lines(spec, plan, f"Megatron-Bridge ({BRIDGE_VERSION}) ConfigContainer overrides", warnings)
    head += ["", "use: python scripts/training/run_recipe.py --recipe <recipe for this model> $(grep -v '^#' <this file>)",
             "the recipe supplies the model shape, data, tokenizer and optimizer"]
    text = comment_block(head) + "".join(f"{key}={_value(value)}\n" for key, value in overrides)
    return Export(target="bridge", text=text, filename="bridge_overrides.txt", warnings=tuple(warnings))


__all__ = ["export", "bridge_overrides", "BRIDGE_VERSION"]
