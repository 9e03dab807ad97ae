"""A plan as Megatron-LM ``pretrain_gpt.py`` arguments (bash arrays, the shape of Megatron-LM's
``examples/gpt3/train_gpt3_175b_distributed.sh``).

Target version: Megatron-LM **core_v0.15.3** (commit 309ffca6a40553362d44fd17efc56b772fa1aa44), the last
line whose flags are explicit ``add_argument`` calls in ``megatron/training/arguments.py``; later versions
generate the same spellings from the config dataclasses (shared/reference/aesthetics-ecosystem.md B2.1).
Every flag below was checked against that file at that commit. Sources by flag family:

* model shape (``--num-layers --hidden-size --ffn-hidden-size --num-attention-heads
  --group-query-attention --num-query-groups --kv-channels --seq-length --max-position-embeddings
  --swiglu --untie-embeddings-and-output-weights``): ``_add_network_size_args``;
* MoE (``--num-experts --moe-router-topk --moe-ffn-hidden-size --moe-shared-expert-intermediate-size
  --moe-layer-freq``): ``_add_moe_args`` (``--moe-layer-freq`` takes a Python list expression such as
  ``([0]*3+[1]*58)``, 0 = dense layer);
* parallel sizes, virtual stages, uneven first/last stages, the layout string, sequence parallelism,
  ``--tp-comm-overlap``, ``--use-distributed-optimizer``, ``--overlap-grad-reduce``,
  ``--overlap-param-gather``, ``--use-megatron-fsdp``, ``--data-parallel-sharding-strategy``:
  ``_add_distributed_args``; the rules they must satisfy are ``validate_args`` in the same file and
  ``TransformerConfig.__post_init__`` (megatron/core/transformer/transformer_config.py) -- re-implemented
  in tests/frameworks/test_export_megatron.py;
* recompute (``--recompute-granularity --recompute-method --recompute-num-layers``): ``_add_training_args``;
  the block method recomputes the first N layers of every *model chunk* (``TransformerBlock
  ._checkpointed_forward``, ``num_layers_per_pipeline_rank = len(self.layers)``,
  megatron/core/transformer/transformer_block.py), so a stage with vpp chunks recomputes vpp·min(N, chunk);
* ``--micro-batch-size --global-batch-size``: ``_add_training_args``; ``--bf16``, ``--fp8-format hybrid``:
  ``_add_mixed_precision_args`` / ``_add_transformer_engine_args``.

The pipeline split is written with the simplest form that is exact: nothing (equal stages),
``--num-layers-per-virtual-pipeline-stage`` (equal stages, interleaved), first/last stage sizes
(equal middle stages; with ``--num-virtual-stages-per-pipeline-rank`` when interleaved), otherwise
``--pipeline-model-parallel-layout`` (any split; stages in virtual-stage order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions, selective_policy
from parplan.costmodel.spec.framework_rules import Profile, sequence_parallel_required
from parplan.costmodel.spec.layout import model_chunk_layers
from parplan.costmodel.spec.optimizer_states import split_states
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.export_common import Export, comment_block, global_batch_size, header_lines
from parplan.frameworks.megatron_model_args import MEGATRON_VERSION, append_flag, model_arg_warnings, model_args
from parplan.frameworks.pool_placement import host_order_array, host_order_lines, rank_blocks
from parplan.frameworks.profiles import export_profile



@dataclass
class MegatronSettings:
    """The Megatron-Core configuration a plan maps to; rendered as CLI flags here and as Bridge keys in
    frameworks/export_bridge.py. ``None`` means "leave Megatron's default"."""

    tp: int
    pp: int
    cp: int
    ep: Optional[int]
    etp: Optional[int]
    num_layers_per_virtual_stage: Optional[int] = None
    num_virtual_stages_per_rank: Optional[int] = None
    first_stage_layers: Optional[int] = None
    last_stage_layers: Optional[int] = None
    layout: Optional[str] = None
    sequence_parallel: bool = False
    cp_comm_type: Optional[str] = None  # --cp-comm-type (None: Megatron's default p2p)
    hierarchical_cp_sizes: Optional[tuple[int, int]] = None  # --hierarchical-context-parallel-sizes (a2a+p2p)
    tp_comm_overlap: bool = False
    recompute_granularity: Optional[str] = None
    recompute_method: Optional[str] = None
    recompute_num_layers: Optional[int] = None
    distributed_optimizer: bool = False
    fsdp_sharding_strategy: Optional[str] = None
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    num_distributed_optimizer_instances: Optional[int] = None  # HSDP replicas (plan.zero_replicas > 1)
    optimizer_dtypes: Optional[tuple[str, str, str]] = None  # precision-aware: main params, exp_avg, exp_avg_sq
    optimizer_offload_fraction: Optional[float] = None  # --optimizer-cpu-offload with this fraction
    overlap_cpu_optimizer_d2h_h2d: bool = False
    overlap_moe_expert_parallel_comm: bool = False
    cpu_offloading_num_layers: Optional[int] = None  # activation CPU offload (plan.activation_offload_layers > 0)
    micro_batch_size: int = 1
    global_batch_size: int = 1
    warnings: list[str] = field(default_factory=list)


def layout_string(plan: Plan, mtp_layers: int = 0) -> str:
    """``--pipeline-model-parallel-layout``: one ``|``-separated entry per model chunk in virtual-stage
    order, ``E`` (embedding) in the first, ``L`` (loss) in the last, ``t*n`` for n decoder layers, ``m`` per
    multi-token-prediction layer before the loss (``PipelineParallelLayerLayout.parse_str_to_list`` and
    ``validate_layer_layout``, megatron/core/transformer/pipeline_parallel_layer_layout.py:107-130 at
    core_v0.15.3: MTP layers after every decoder layer, all in the last stage's last chunk with the loss)."""
    chunks = model_chunk_layers(plan)
    parts = [f"t*{n}" if n else "" for n in chunks]  # an end chunk may hold only the embedding or the loss
    parts[0] = "E" + parts[0]
    parts[-1] = parts[-1] + "m" * mtp_layers + "L"  # MTP after the last decoder layer, with the loss (layout.py:107-130)
    return "|".join(parts)


def _pipeline_split(plan: Plan, s: MegatronSettings, mtp_layers: int = 0) -> None:
    layers = plan.stage_layers
    if plan.stage_pools is not None and len(set(layers)) > 1:  # on pools: every stage's own count, stated (issue 21)
        s.layout = layout_string(plan, mtp_layers)
        return
    if plan.pipeline_layout is not None and any(len(set(ch)) > 1 for ch in plan.pipeline_layout):
        s.layout = layout_string(plan, mtp_layers)  # chunks that differ within a stage: only the layout says so
        return
    if len(set(layers)) == 1:
        if plan.vpp > 1:
            s.num_layers_per_virtual_stage = layers[0] // plan.vpp
        return
    middle = layers[1:-1]
    if len(set(middle)) <= 1:
        s.first_stage_layers, s.last_stage_layers = layers[0], layers[-1]
        if plan.vpp > 1:
            s.num_virtual_stages_per_rank = plan.vpp
        return
    s.layout = layout_string(plan, mtp_layers)


def block_recompute_layers(stage_layers: list[int], vpp: int, n: int,
                           layout: Optional[list[list[int]]] = None) -> list[int]:
    """Layers per stage that ``--recompute-method block --recompute-num-layers n`` recomputes: the first n of
    every model chunk (each chunk's layers from ``layout``, else equal chunks)."""
    chunks = layout or [[layers // vpp] * vpp for layers in stage_layers]
    return [sum(min(n, c) for c in stage) for stage in chunks]


def _recompute(spec: Spec, plan: Plan, s: MegatronSettings) -> None:
    if plan.recompute == "selective":
        s.recompute_granularity = "selective"
        policy = selective_policy(resolve_assumptions(spec.assumptions), spec.model.mla is not None)
        if policy == "deepseek_v3":
            s.warnings.append("the cost model's selective recompute is DeepSeek-V3's (RMSNorm outputs, MLA "
                              "up-projections, the experts' activation): add --recompute-modules layernorm "
                              "mla_up_proj moe_act (Megatron-Core transformer_config.py:560-580); without it Megatron "
                              "recomputes the core attention only (core_attn)")
        elif policy != "attention":
            s.warnings.append("the cost model's selective recompute policy is 'alternate_matmuls' (PyTorch per-op "
                              "checkpointing); Megatron-LM's --recompute-granularity selective recomputes the core "
                              "attention (--recompute-modules core_attn) instead")
        return
    if plan.recompute != "full" or not any(plan.recompute_layers):
        if plan.recompute == "full":
            s.warnings.append("recompute 'full' with recompute_layers all 0 recomputes nothing; exported as no "
                              "recompute")
        return
    s.recompute_granularity = "full"
    if list(plan.recompute_layers) == list(plan.stage_layers):
        s.recompute_method, s.recompute_num_layers = "uniform", 1
        return
    s.recompute_method = "block"
    planned = list(plan.recompute_layers)
    top = max(max(ch) for ch in plan.pipeline_layout) if plan.pipeline_layout else max(plan.stage_layers) // plan.vpp
    candidates = [(n, block_recompute_layers(plan.stage_layers, plan.vpp, n, plan.pipeline_layout))
                  for n in range(1, top + 1)]
    exact = [n for n, done in candidates if done == planned]
    if exact:
        s.recompute_num_layers = exact[0]
        return
    n, done = next((n, done) for n, done in candidates if all(d >= r for d, r in zip(done, planned)))
    s.recompute_num_layers = n
    s.warnings.append(f"recompute_layers {planned} per stage: Megatron-LM recomputes the same number of layers in "
                      f"every model chunk (--recompute-method block); exported --recompute-num-layers {n}, which "
                      f"recomputes {done} (at least as many: slower than planned, never more memory)")


def megatron_settings(spec: Spec, plan: Plan, prof: Optional[Profile] = None) -> MegatronSettings:
    """Map a plan onto Megatron-Core's settings; warnings for what Megatron-LM cannot run as planned. ``prof``: the
    framework whose rules decide what the export changes (default megatron-core at :data:`MEGATRON_VERSION`; the
    Bridge export passes its own), the rules ``runs_on`` applies (costmodel/spec/framework_rules.py)."""
    prof = prof or export_profile("megatron-core")
    knobs = resolve_assumptions(spec.assumptions)
    moe = spec.model.moe is not None
    s = MegatronSettings(tp=plan.tp, pp=plan.pp, cp=plan.cp, ep=plan.ep if moe else None,
                         etp=plan.etp if moe else None, micro_batch_size=plan.micro_batch_size,
                         global_batch_size=global_batch_size(plan))
    _pipeline_split(plan, s, spec.model.num_mtp_layers)
    if plan.schedule in (Schedule.ZB_H1, Schedule.DUALPIPE, Schedule.DUALPIPEV):
        s.warnings.append(f"schedule '{plan.schedule}': upstream Megatron-LM has no zero-bubble or DualPipe schedule "
                          f"(megatron/core/pipeline_parallel/schedules.py: 1F1B and interleaved 1F1B); exported as "
                          f"{'interleaved 1F1B' if plan.vpp > 1 else '1F1B'}, whose bubble is larger than planned")
    _tensor_and_context(spec, plan, prof, knobs, s)
    _recompute(spec, plan, s)
    if plan.zero_stage == 1:
        s.distributed_optimizer = True
    elif plan.zero_stage in (2, 3):
        s.fsdp_sharding_strategy = "optim_grads" if plan.zero_stage == 2 else "optim_grads_params"
    if plan.dp > 1 and knobs.dp_comm_overlap > 0:
        s.overlap_grad_reduce = True
        s.overlap_param_gather = plan.zero_stage >= 1
    _memory_dims(plan, knobs, s)
    if plan.moe_a2a_overlap:  # arguments.py:3151 at core_v0.15.3 (costmodel/moe/moe_comm.py)
        s.overlap_moe_expert_parallel_comm = True
    if plan.activation_offload_layers:
        # TransformerConfig.cpu_offloading_num_layers (megatron/core/model_parallel_config.py:461 at d98e8a64; the
        # same field since core_v0.9.0); pretrain_gpt.py's --cpu-offloading-num-layers N > 0 turns cpu_offloading
        # on (arguments.py:1950-1951 at d98e8a64), activations only (cpu_offloading_activations defaults True,
        # cpu_offloading_weights False: model_parallel_config.py:470-473)
        s.cpu_offloading_num_layers = plan.activation_offload_layers
        s.warnings.append(f"activation_offload_layers {plan.activation_offload_layers}: --cpu-offloading-num-layers "
                          f"is a pretrain_gpt.py flag from Megatron-LM core_v0.16.0 on (generated from "
                          f"TransformerConfig, megatron/training/argument_utils.py:106); {MEGATRON_VERSION} has none: "
                          f"there set TransformerConfig.cpu_offloading = True and cpu_offloading_num_layers = "
                          f"{plan.activation_offload_layers}")
    if plan.moe_fp8_dispatch:
        s.warnings.append("moe_fp8_dispatch: Megatron-LM core_v0.15.3 has no FP8 dispatch; on main after "
                          "core_v0.19.0 it is moe_dispatch_fwd_dtype = 'mxfp8' with --moe-token-dispatcher-type "
                          "flex --moe-flex-dispatcher-backend ncclep (transformer_config.py:997 at d98e8a64); not "
                          "exported: the dispatch moves BF16, more all-to-all time than planned")
    return s


def _tensor_and_context(spec: Spec, plan: Plan, prof: Profile, knobs, s: MegatronSettings) -> None:
    """Sequence parallelism (forced where Megatron-Core requires it beside EP), the CP communication type and its
    hierarchical sizes, and TP communication overlap."""
    s.sequence_parallel = plan.tp > 1 and plan.sequence_parallel
    if sequence_parallel_required(prof, plan) is not None:
        # ModelParallelConfig.__post_init__ says SP "must be used" with EP > 1 and TP > 1 through warnings.warn,
        # a name the module never imports (megatron/core/model_parallel_config.py:388-393, imports :3-6, at
        # core_v0.15.3): without --sequence-parallel the run stops on a NameError. Written with it; the profile's
        # rule (Profile.sequence_parallel_with_tp_ep) keeps such a plan out of runs_on and the search
        s.sequence_parallel = True
        s.warnings.append(f"tp {plan.tp} with ep {plan.ep} without sequence parallelism: Megatron-Core requires "
                          "--sequence-parallel when TP and EP are combined; exported with it (less activation "
                          f"memory than planned, the TP collectives as reduce-scatter/all-gather; {prof.name} is "
                          "not in this plan's runs_on)")
    if plan.cp > 1 and plan.cp_comm_type != "p2p":
        # Megatron-LM arguments.py:3221 --cp-comm-type; a2a+p2p needs the two levels' sizes (:580-585): the a2a
        # level is the CP members of one NVLink domain (costmodel/communication/context_parallel.py)
        s.cp_comm_type = plan.cp_comm_type
        if plan.cp_comm_type == "a2a+p2p":
            from parplan.costmodel.evaluation.choice import nvlink_domain_size
            from parplan.costmodel.spec.hardware import resolve_gpu
            from parplan.costmodel.communication.mesh import ep_members_per_domain

            inner = ep_members_per_domain(plan.tp, plan.cp, nvlink_domain_size(spec, resolve_gpu(spec.cluster)),
                                          plan.num_gpus)
            s.hierarchical_cp_sizes = (inner, plan.cp // inner)
    if plan.tp > 1 and knobs.tp_comm_overlap > 0:
        if s.sequence_parallel:
            s.tp_comm_overlap = True
        else:
            s.warnings.append("the cost model hides TP communication (assumptions.tp_comm_overlap > 0) but "
                              "Megatron-LM's --tp-comm-overlap needs --sequence-parallel; not exported")


def _memory_dims(plan: Plan, knobs, s: MegatronSettings) -> None:
    """HSDP (--num-distributed-optimizer-instances, also Megatron-FSDP's HSDP switch), the precision-aware
    optimizer's dtypes and the optimizer CPU offload (profiles.py 'megatron.partial_dist_opt',
    'megatron.fsdp_hsdp', 'megatron.precision_aware', 'megatron.cpu_offload')."""
    if plan.zero_replicas > 1:
        s.num_distributed_optimizer_instances = plan.zero_replicas
    if plan.optimizer_states is not None:
        s.optimizer_dtypes = split_states(plan.optimizer_states)
    if plan.optimizer_offload_fraction > 0:
        s.optimizer_offload_fraction = plan.optimizer_offload_fraction
        s.overlap_cpu_optimizer_d2h_h2d = knobs.optimizer_offload_overlap
        if plan.optimizer_states is None:
            s.optimizer_dtypes = ("fp32", "fp32", "fp32")
            s.warnings.append("optimizer CPU offload needs --use-precision-aware-optimizer (arguments.py:1884); "
                              "exported with fp32 states (10 B per parameter with remainders), not the planned "
                              "assumptions.optimizer_bytes")


def parallel_args(s: MegatronSettings) -> list[str]:
    out: list[str] = []
    append_flag(out, "--tensor-model-parallel-size", s.tp)
    append_flag(out, "--pipeline-model-parallel-size", s.pp)
    append_flag(out, "--context-parallel-size", s.cp)
    if s.cp_comm_type is not None:
        append_flag(out, "--cp-comm-type", s.cp_comm_type)
    if s.hierarchical_cp_sizes is not None:
        out += ["--hierarchical-context-parallel-sizes", *map(str, s.hierarchical_cp_sizes)]  # nargs='+'
    if s.ep is not None:
        append_flag(out, "--expert-model-parallel-size", s.ep)
        append_flag(out, "--expert-tensor-parallel-size", s.etp)
    if s.num_layers_per_virtual_stage is not None:
        append_flag(out, "--num-layers-per-virtual-pipeline-stage", s.num_layers_per_virtual_stage)
    if s.num_virtual_stages_per_rank is not None:
        append_flag(out, "--num-virtual-stages-per-pipeline-rank", s.num_virtual_stages_per_rank)
    if s.first_stage_layers is not None:
        append_flag(out, "--decoder-first-pipeline-num-layers", s.first_stage_layers)
        append_flag(out, "--decoder-last-pipeline-num-layers", s.last_stage_layers)
    if s.layout is not None:
        append_flag(out, "--pipeline-model-parallel-layout", s.layout)
    if s.sequence_parallel:
        append_flag(out, "--sequence-parallel")
    if s.tp_comm_overlap:
        append_flag(out, "--tp-comm-overlap")
    if s.distributed_optimizer:
        append_flag(out, "--use-distributed-optimizer")
    if s.fsdp_sharding_strategy is not None:
        append_flag(out, "--use-megatron-fsdp")
        append_flag(out, "--data-parallel-sharding-strategy", s.fsdp_sharding_strategy)
        append_flag(out, "--ckpt-format", "fsdp_dtensor")
    if s.overlap_grad_reduce:
        append_flag(out, "--overlap-grad-reduce")
    if s.overlap_param_gather:
        append_flag(out, "--overlap-param-gather")
    if s.num_distributed_optimizer_instances is not None:
        append_flag(out, "--num-distributed-optimizer-instances", s.num_distributed_optimizer_instances)
    if s.optimizer_dtypes is not None:
        main, m1, m2 = s.optimizer_dtypes
        append_flag(out, "--use-precision-aware-optimizer")
        append_flag(out, "--main-params-dtype", main)
        append_flag(out, "--exp-avg-dtype", m1)
        append_flag(out, "--exp-avg-sq-dtype", m2)
    if s.optimizer_offload_fraction is not None:
        append_flag(out, "--optimizer-cpu-offload")
        append_flag(out, "--optimizer-offload-fraction", f"{s.optimizer_offload_fraction:g}")
        if s.overlap_cpu_optimizer_d2h_h2d:
            append_flag(out, "--overlap-cpu-optimizer-d2h-h2d")
    if s.overlap_moe_expert_parallel_comm:
        append_flag(out, "--overlap-moe-expert-parallel-comm")
    if s.cpu_offloading_num_layers is not None:
        append_flag(out, "--cpu-offloading-num-layers", s.cpu_offloading_num_layers)
    return out


def training_args(spec: Spec, s: MegatronSettings) -> list[str]:
    out: list[str] = []
    append_flag(out, "--micro-batch-size", s.micro_batch_size)
    append_flag(out, "--global-batch-size", s.global_batch_size)
    if s.recompute_granularity is not None:
        append_flag(out, "--recompute-granularity", s.recompute_granularity)
    if s.recompute_method is not None:
        append_flag(out, "--recompute-method", s.recompute_method)
        append_flag(out, "--recompute-num-layers", s.recompute_num_layers)
    append_flag(out, "--bf16")
    if spec.training.precision == "fp8":
        append_flag(out, "--fp8-format", "hybrid")
    return out


def megatron_argument_groups(spec: Spec, plan: Plan) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """``[(array name, argv tokens)]`` and the warnings: the export without its text rendering."""
    s = megatron_settings(spec, plan)
    groups = [("MODEL_ARGS", model_args(spec)), ("MODEL_PARALLEL_ARGS", parallel_args(s)),
              ("TRAINING_ARGS", training_args(spec, s))]
    return groups, s.warnings + model_arg_warnings(spec, plan)


def megatron_argv(spec: Spec, plan: Plan) -> list[str]:
    """All exported flags as one argv list (what ``pretrain_gpt.py`` receives)."""
    groups, _ = megatron_argument_groups(spec, plan)
    return [token for _, tokens in groups for token in tokens]


def _quote(token: str) -> str:
    return token if all(c.isalnum() or c in "-_.=/" for c in token) else "'" + token.replace("'", "'\\''") + "'"


def _array(name: str, tokens: list[str]) -> str:
    lines, i = [], 0
    while i < len(tokens):
        flag, i = tokens[i], i + 1
        values = []
        while i < len(tokens) and not tokens[i].startswith("--"):  # nargs='+' flags take several
            values.append(tokens[i])
            i += 1
        lines.append(" ".join([f"    {flag}", *map(_quote, values)]))
    return f"{name}=(\n" + "\n".join(lines) + "\n)\n"


def render(spec: Spec, plan: Plan) -> tuple[str, list[str]]:
    groups, warnings = megatron_argument_groups(spec, plan)
    fsdp = plan.zero_stage in (2, 3)
    head = header_lines(spec, plan, f"Megatron-LM ({MEGATRON_VERSION}) pretrain_gpt.py arguments", warnings)
    text = "#!/bin/bash\n" + comment_block(head) + "\n"
    if fsdp:
        text += "# Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 (validate_args), so it is not set here.\n"
    else:
        text += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    text += "\n" + "\n".join(_array(name, tokens) for name, tokens in groups) + "\n"
    text += comment_block([
        "Not part of the plan, yours to add: data (--data-path), tokenizer (--tokenizer-type ...; vocab size "
        f"{spec.model.vocab_size}), optimizer, schedule, checkpointing, and what the spec does not state (the "
        "rotary base, --rotary-base; the norm epsilon, --norm-epsilon).",
    ])
    text += 'MEGATRON_ARGS=( ' + " ".join(f'"${{{name}[@]}}"' for name, _ in groups) + " )\n"
    if plan.stage_pools is not None:  # several cluster.pools: which nodes hold which stage (frameworks/pool_placement.py)
        text += "\n" + comment_block(host_order_lines(spec, plan)) + host_order_array(spec, plan)
        nproc = "/".join(str(n) for n in sorted({b.per_node for b in rank_blocks(spec, plan)}))
    else:
        nproc = str(spec.cluster.gpus_per_node)
    text += comment_block([f"torchrun --nproc-per-node {nproc} ... pretrain_gpt.py "
                           '"${MEGATRON_ARGS[@]}"   (solver-cli optimize ... --emit slurm writes the job)'])
    return text, warnings


def export(spec: Spec, plan: Plan) -> Export:
    text, warnings = render(spec, plan)
    return Export(target="megatron", text=text, filename="megatron_args.sh", warnings=tuple(warnings))


__all__ = ["export", "render", "megatron_settings", "megatron_argument_groups", "megatron_argv", "MegatronSettings",
           "layout_string", "block_recompute_layers", "MEGATRON_VERSION"]
