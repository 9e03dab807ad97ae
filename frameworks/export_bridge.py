"""A plan as Megatron-Bridge ``ConfigContainer`` overrides (``key=value``, one per line).

Target: Megatron-Bridge **v0.6.0** (NVIDIA-NeMo/Megatron-Bridge tag v0.6.0, commit 51885cf1, 2026-08-19; PyPI
``megatron-bridge`` 0.6.x), the newest release. ``scripts/training/run_recipe.py --recipe <recipe>`` takes
trailing Hydra-style ``KEY=VALUE`` overrides of the container's groups (``model.*``, ``train.*``, ``ddp.*``,
``optimizer.*``, ``dataset.*``), applied by ``apply_cli_overrides`` -> ``process_config_with_overrides``
(scripts/training/recipe_runner.py:293-297 at v0.6.0). At v0.6.0 the recipes' model is a ``GPTModelProvider``,
a Megatron-Core ``TransformerConfig`` (src/megatron/bridge/models/gpt_provider.py:129), so the parallel fields
are ``model.tensor_model_parallel_size`` ... (run_recipe.py:42-49 lists them so); on main after v0.6.0
(067f987d) recipes built on ``GPTModelConfig`` hold them under ``model.transformer.*``
(src/megatron/bridge/training/config.py:1651-1652, models/gpt/gpt_builder.py:43): not this target.

Every recipe default the plan decides is written, so none survives: VPP (``null`` for one chunk), the
first/last stage sizes, the layout (an explicit ``model.pipeline_model_parallel_layout`` also stops
``sync_model_pipeline_layout`` from rebuilding a recipe-owned layout, recipe_runner.py:373-398),
activation CPU offload (``model.cpu_offloading=false`` when the plan offloads nothing: the GB200 Llama-3 70B perf
recipe offloads 20 layers, found by benchmarks/framework_parsers.py --megatron-bridge),
``account_for_embedding/loss_in_pipeline_split`` (false: they conflict with a layout or first/last sizes,
Megatron-Core transformer_config.py:1019-1048 at core_v0.15.3), the recompute settings, the sequence length
(``dataset.seq_length`` owns it and the runner copies it to ``model.seq_length``, run_recipe.py:35-39; both are
written) and ``model.mtp_num_layers``. Values contain no spaces (lists as ``[2,8]``), so the documented
``$(grep -v '^#' file)`` use splits one override per word. The decisions (pipeline split, recompute, ZeRO) are
Megatron-Core's and are shared with the Megatron-LM exporter (frameworks/export_megatron.py):

* ``--num-layers-per-virtual-pipeline-stage`` has no Bridge key; Bridge takes the chunk count,
  ``model.virtual_pipeline_model_parallel_size``;
* ``--use-distributed-optimizer`` is two keys kept in sync, ``ddp.use_distributed_optimizer`` and
  ``optimizer.use_distributed_optimizer``;
* ZeRO-2/3 is Megatron-FSDP: ``ddp.use_megatron_fsdp``, ``ddp.data_parallel_sharding_strategy`` and
  ``checkpoint.ckpt_format=fsdp_dtensor`` (:func:`fsdp_overrides`), the flags the Megatron-LM export writes;
* ``--tp-comm-overlap`` (Bridge's ``comm_overlap.*`` group) has no key in the verified mapping: a warning;
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

The model shape comes from the recipe (a model provider); it is not overridden here, except the MTP depth
(``model.mtp_num_layers``, a ``TransformerConfig`` field the layout is validated against) and the family
(:func:`family_overrides`: norm, position embedding, biases, gated MLP, tied embeddings, query groups); MLA comes
from the recipe: a warning names the widths the plan assumed.
"""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.export_common import Export, comment_block, header_lines, model_feature_warnings
from parplan.frameworks.export_megatron import MegatronSettings, megatron_settings
from parplan.frameworks.pool_placement import host_order_lines
from parplan.frameworks.profile_data import EXPORT_VERSIONS
from parplan.frameworks.profiles import export_profile

BRIDGE_VERSION = EXPORT_VERSIONS["megatron-bridge"]
BRIDGE_COMMIT = "51885cf132b2814188b6855c25a8588254274c2a"


def _value(value) -> str:
    """A Hydra override value without spaces: null, true/false, [a,b], a quoted layout string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"' if "|" in value or "*" in value else value
    return str(value)


def family_overrides(spec: Spec, warnings: list[str]) -> list[tuple[str, object]]:
    """The model's family as provider fields, so no recipe default survives (the architecture the cost model prices,
    as the Megatron-LM export writes it: megatron_model_args.family_args): ``normalization``, ``add_bias_linear``,
    ``gated_linear_unit`` and ``num_query_groups`` are Megatron-Core ``TransformerConfig`` fields,
    ``position_embedding_type`` and ``share_embeddings_and_output_weights`` ``GPTModelProvider``'s
    (src/megatron/bridge/models/gpt_provider.py at v0.6.0; its defaults LayerNorm, learned_absolute, tied);
    ``qk_layernorm`` builds MLA's latent norms. The activation is a callable (``activation_func``) with no override:
    the recipe's runs."""
    m = spec.model
    out: list[tuple[str, object]] = [
        ("model.normalization", "RMSNorm"), ("model.position_embedding_type", "rope"),
        ("model.add_bias_linear", m.moe is not None and m.moe.expert_bias),
        ("model.gated_linear_unit", m.gated_mlp),
        ("model.share_embeddings_and_output_weights", m.tie_embeddings)]
    if m.mla is None:
        out.append(("model.num_query_groups", m.kv_heads))
    else:
        out.append(("model.qk_layernorm", True))
    if not m.gated_mlp:
        warnings.append("model.gated_mlp false: the plan priced a GeLU MLP; the activation is the recipe's "
                        "model.activation_func (a callable, no override): use a recipe with GeLU")
    return out


def fsdp_overrides(strategy: Optional[str]) -> list[tuple[str, object]]:
    """ZeRO-2/3 as Megatron-FSDP (``strategy``: ``optim_grads`` / ``optim_grads_params``; None: off, written so a
    recipe's FSDP does not survive). Megatron-Bridge v0.6.0 (51885cf1) turns it on with ``ddp.use_megatron_fsdp``
    (``ConfigContainer.validate`` -> ``_validate_and_apply_megatron_fsdp_configs``, src/megatron/bridge/training/
    config.py:1340-1341, 1064-1113: it sets the distributed optimizer and asserts ``checkpoint.ckpt_format ==
    "fsdp_dtensor"`` when saving or loading), the sharding by Megatron-Core's ``DistributedDataParallelConfig.
    data_parallel_sharding_strategy``, as the performance scripts set it (scripts/performance/utils/overrides.py:
    94-100 ``_set_megatron_fsdp_overrides``)."""
    if strategy is None:
        return [("ddp.use_megatron_fsdp", False)]
    # Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != "1" (config.py:1101-1103), which the H100 perf recipes'
    # env_vars set with TP or CP; an explicit Hydra env_vars override is final (scripts/performance/run_script.py:
    # 77-87) and 8 is the perf scripts' own value when 1 is not needed (utils/overrides.py:257-263)
    return [("ddp.use_megatron_fsdp", True), ("ddp.data_parallel_sharding_strategy", strategy),
            ("checkpoint.ckpt_format", "fsdp_dtensor"), ("++env_vars.CUDA_DEVICE_MAX_CONNECTIONS", 8)]


def optimizer_overrides(s: MegatronSettings, warnings: list[str]) -> list[tuple[str, object]]:
    """The optimizer and its data-parallel side: distributed optimizer or Megatron-FSDP, the DP overlaps, HSDP
    instances, the precision-aware states (a warning: no Bridge key takes torch dtypes) and CPU offload."""
    distributed = s.distributed_optimizer or s.fsdp_sharding_strategy is not None
    out: list[tuple[str, object]] = [("ddp.use_distributed_optimizer", distributed),
                                     ("optimizer.use_distributed_optimizer", distributed)]
    out += fsdp_overrides(s.fsdp_sharding_strategy)
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
    return out


def bridge_overrides(spec: Spec, plan: Plan) -> tuple[list[tuple[str, object]], list[str]]:
    """``[(key, value)]`` overrides and the warnings."""
    s = megatron_settings(spec, plan, export_profile("megatron-bridge"))
    warnings = list(s.warnings) + model_feature_warnings(spec, "Megatron-Bridge", "the recipe's model provider",
                                                         mtp=False)  # model.mtp_num_layers is written below
    out: list[tuple[str, object]] = [
        ("model.tensor_model_parallel_size", s.tp),
        ("model.pipeline_model_parallel_size", s.pp),
        ("model.context_parallel_size", s.cp),
    ]
    if plan.cp > 1:  # Megatron-Core TransformerConfig.cp_comm_type, written even as p2p (a recipe may set another)
        out.append(("model.cp_comm_type", plan.cp_comm_type))
    if s.hierarchical_cp_sizes is not None:
        out.append(("model.hierarchical_context_parallel_sizes", list(s.hierarchical_cp_sizes)))
    if s.ep is not None:
        out += [("model.expert_model_parallel_size", s.ep), ("model.expert_tensor_parallel_size", s.etp)]
    # the pipeline split: every field of it, so no recipe default survives (module docstring)
    out += [("model.virtual_pipeline_model_parallel_size", plan.vpp if plan.vpp > 1 else None),
            ("model.num_layers_in_first_pipeline_stage", s.first_stage_layers),
            ("model.num_layers_in_last_pipeline_stage", s.last_stage_layers),
            ("model.pipeline_model_parallel_layout", s.layout),
            ("model.account_for_embedding_in_pipeline_split", False),
            ("model.account_for_loss_in_pipeline_split", False),
            ("model.mtp_num_layers", spec.model.num_mtp_layers or None)]
    out += family_overrides(spec, warnings)
    out.append(("model.sequence_parallel", s.sequence_parallel))
    out += [("model.recompute_granularity", s.recompute_granularity), ("model.recompute_method", s.recompute_method),
            ("model.recompute_num_layers", s.recompute_num_layers)]
    if s.recompute_granularity == "selective":  # the attention core, what --recompute-granularity selective means in
        # Megatron-LM; a recipe's own modules (DeepSeek-V3's [mla_up_proj, mlp]) would otherwise survive
        out.append(("model.recompute_modules", ["core_attn"]))
    out += [("model.seq_length", spec.training.seq_len), ("dataset.seq_length", spec.training.seq_len)]
    out += [("train.micro_batch_size", s.micro_batch_size), ("train.global_batch_size", s.global_batch_size)]
    out += optimizer_overrides(s, warnings)
    if s.cpu_offloading_num_layers is not None:  # the recipes' own keys (profiles.py 'bridge.activation_offload')
        out += [("model.cpu_offloading", True), ("model.cpu_offloading_weights", False),
                ("model.cpu_offloading_num_layers", s.cpu_offloading_num_layers)]
    else:  # reset: the GB200 Llama-3 70B perf recipe offloads 20 layers (perf_recipes/llama/gb200/llama3.py at v0.6.0)
        out.append(("model.cpu_offloading", False))
    if s.overlap_moe_expert_parallel_comm or spec.model.moe is not None:  # CommOverlapConfig's key, reset for MoE:
        # the MoE perf recipes turn it on, and Bridge asserts EP > 1 with it (training/comm_overlap.py:479 at v0.6.0)
        out.append(("comm_overlap.overlap_moe_expert_parallel_comm", bool(s.overlap_moe_expert_parallel_comm)))
    moe = spec.model.moe
    if moe is not None and moe.dispatcher == "flex" and moe.dispatcher_sms is not None:
        warnings.append(f"dispatcher_sms {moe.dispatcher_sms}: set model.moe_{moe.dispatcher_backend}_num_sms = "
                        f"{moe.dispatcher_sms} in the recipe (Megatron-Core's flag of that name; no verified "
                        f"Megatron-Bridge key)")
    if s.tp_comm_overlap:
        warnings.append("TP communication overlap: Megatron-Bridge configures it in the comm_overlap group of its "
                        "recipes (no single verified key); set it in the recipe")
    if spec.training.precision == "fp8":
        warnings.append("FP8 training: choose the recipe's FP8 mixed-precision config (mixed_precision group); "
                        "no single verified key")
    return out, warnings


def export(spec: Spec, plan: Plan) -> Export:
    overrides, warnings = bridge_overrides(spec, plan)
    head = header_lines(spec, plan, f"Megatron-Bridge {BRIDGE_VERSION} ({BRIDGE_COMMIT[:8]}) ConfigContainer overrides",
                        warnings)
    s = megatron_settings(spec, plan, export_profile("megatron-bridge"))
    head += ["", "use: python scripts/training/run_recipe.py --recipe <recipe for this model> $(grep -v '^#' <this file>)",
             f"or on a performance recipe: python scripts/performance/setup_experiment.py -m <family> -mr <recipe> "
             f"-ng {plan.num_gpus} -g <gpu> -c <precision> -gb {s.global_batch_size} -mb {s.micro_batch_size} "
             f"$(grep -v '^#' <this file>)",
             "(-gb: on another GPU count than the recipe's, set_post_overrides rescales a global batch equal to the "
             "recipe's own, scripts/performance/utils/overrides.py at v0.6.0)",
             "the recipe supplies the model shape, data, tokenizer and optimizer"]
    if plan.stage_pools is not None:  # several cluster.pools: Bridge initializes Megatron-Core's rank order (v0.6.0
        head += [""] + host_order_lines(spec, plan)  # training/initialize.py:820), so the same host order places them
    text = comment_block(head) + "".join(f"{key}={_value(value)}\n" for key, value in overrides)
    return Export(target="bridge", text=text, filename="bridge_overrides.txt", warnings=tuple(warnings))


__all__ = ["export", "bridge_overrides", "fsdp_overrides", "family_overrides", "BRIDGE_VERSION", "BRIDGE_COMMIT"]
