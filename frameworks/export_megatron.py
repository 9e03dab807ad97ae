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
  in tests/test_export_megatron.py;
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

from parplan.costmodel.assumptions import resolve_assumptions, selective_policy
from parplan.costmodel.optimizer_states import split_states
from parplan.costmodel.spec import Plan, Spec
from parplan.frameworks.export_common import Export, comment_block, global_batch_size, header_lines, model_chunk_layers
from parplan.frameworks.pool_placement import host_order_array, host_order_lines, rank_blocks

MEGATRON_VERSION = "core_v0.15.3"


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


def megatron_settings(spec: Spec, plan: Plan) -> MegatronSettings:
    """Map a plan onto Megatron-Core's settings; warnings for what Megatron-LM cannot run as planned."""
    knobs = resolve_assumptions(spec.assumptions)
    moe = spec.model.moe is not None
    s = MegatronSettings(tp=plan.tp, pp=plan.pp, cp=plan.cp, ep=plan.ep if moe else None,
                         etp=plan.etp if moe else None, micro_batch_size=plan.micro_batch_size,
                         global_batch_size=global_batch_size(plan))
    _pipeline_split(plan, s, spec.model.num_mtp_layers)
    if plan.schedule in ("zb-h1", "dualpipe", "dualpipev"):
        s.warnings.append(f"schedule '{plan.schedule}': upstream Megatron-LM has no zero-bubble or DualPipe schedule "
                          f"(megatron/core/pipeline_parallel/schedules.py: 1F1B and interleaved 1F1B); exported as "
                          f"{'interleaved 1F1B' if plan.vpp > 1 else '1F1B'}, whose bubble is larger than planned")
    s.sequence_parallel = plan.tp > 1 and plan.sequence_parallel
    if moe and plan.tp > 1 and plan.ep > 1 and not s.sequence_parallel:
        # ModelParallelConfig.__post_init__ says SP "must be used" with EP > 1 and TP > 1 through warnings.warn,
        # a name the module never imports (megatron/core/model_parallel_config.py:388-393, imports :3-6, at
        # core_v0.15.3): without --sequence-parallel the run stops on a NameError. Written with it
        s.sequence_parallel = True
        s.warnings.append(f"tp {plan.tp} with ep {plan.ep} without sequence parallelism: Megatron-Core requires "
                          "--sequence-parallel when TP and EP are combined; exported with it (less activation "
                          "memory than planned, the TP collectives as reduce-scatter/all-gather)")
    if plan.cp > 1 and plan.cp_comm_type != "p2p":
        # Megatron-LM arguments.py:3221 --cp-comm-type; a2a+p2p needs the two levels' sizes (:580-585): the a2a
        # level is the CP members of one NVLink domain (costmodel/context_parallel.py)
        s.cp_comm_type = plan.cp_comm_type
        if plan.cp_comm_type == "a2a+p2p":
            from parplan.costmodel.choice import nvlink_domain_size
            from parplan.costmodel.hardware import resolve_gpu
            from parplan.costmodel.mesh import ep_members_per_domain

            inner = ep_members_per_domain(plan.tp, plan.cp, nvlink_domain_size(spec, resolve_gpu(spec.cluster)),
                                          plan.num_gpus)
            s.hierarchical_cp_sizes = (inner, plan.cp // inner)
    if plan.tp > 1 and knobs.tp_comm_overlap > 0:
        if s.sequence_parallel:
            s.tp_comm_overlap = True
        else:
            s.warnings.append("the cost model hides TP communication (assumptions.tp_comm_overlap > 0) but "
                              "Megatron-LM's --tp-comm-overlap needs --sequence-parallel; not exported")
    _recompute(spec, plan, s)
    if plan.zero_stage == 1:
        s.distributed_optimizer = True
    elif plan.zero_stage in (2, 3):
        s.fsdp_sharding_strategy = "optim_grads" if plan.zero_stage == 2 else "optim_grads_params"
    if plan.dp > 1 and knobs.dp_comm_overlap > 0:
        s.overlap_grad_reduce = True
        s.overlap_param_gather = plan.zero_stage >= 1
    _memory_dims(plan, knobs, s)
    if plan.moe_a2a_overlap:  # arguments.py:3151 at core_v0.15.3 (costmodel/moe_comm.py)
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


def _flag(args: list[str], name: str, value=None) -> None:
    args.append(name)
    if value is not None:
        args.append(str(value))


def model_args(spec: Spec) -> list[str]:
    m = spec.model
    out: list[str] = []
    _flag(out, "--num-layers", m.num_layers)
    _flag(out, "--hidden-size", m.hidden_size)
    _flag(out, "--ffn-hidden-size", m.ffn_hidden_size)
    _flag(out, "--num-attention-heads", m.num_attention_heads)
    if m.kv_heads != m.num_attention_heads:
        _flag(out, "--group-query-attention")
        _flag(out, "--num-query-groups", m.kv_heads)
    if m.head_dim is not None and m.head_dim * m.num_attention_heads != m.hidden_size:
        _flag(out, "--kv-channels", m.head_dim)
    _flag(out, "--seq-length", spec.training.seq_len)
    _flag(out, "--max-position-embeddings", spec.training.seq_len)
    if m.gated_mlp:
        _flag(out, "--swiglu")
    if not m.tie_embeddings:
        _flag(out, "--untie-embeddings-and-output-weights")
    if m.moe is not None:
        _flag(out, "--num-experts", m.moe.num_experts)
        _flag(out, "--moe-router-topk", m.moe.top_k)
        _flag(out, "--moe-ffn-hidden-size", m.moe.expert_ffn_hidden_size)
        if m.moe.num_shared_experts:
            width = m.moe.shared_expert_ffn_hidden_size or m.moe.expert_ffn_hidden_size
            _flag(out, "--moe-shared-expert-intermediate-size", m.moe.num_shared_experts * width)
        if m.moe.first_dense_layers:
            k = m.moe.first_dense_layers
            _flag(out, "--moe-layer-freq", f"([0]*{k}+[1]*{m.num_layers - k})")
        # the dispatcher priced (costmodel/moe_dispatch.py); Megatron's own default is allgather
        # (core_v0.15.3 arguments.py:3131-3142: --moe-token-dispatcher-type, --moe-enable-deepep for flex,
        # --moe-expert-capacity-factor); HybridEP is --moe-flex-dispatcher-backend hybridep from core_v0.16.0 (3df20090)
        _flag(out, "--moe-token-dispatcher-type", m.moe.dispatcher)
        if m.moe.dispatcher == "flex":
            _flex_backend(out, m.moe)
        if m.moe.capacity_factor is not None:
            _flag(out, "--moe-expert-capacity-factor", m.moe.capacity_factor)
    if m.mla is not None:  # _add_network_size_args / _add_mla_args, arguments.py:1664 and 3165-3176 at core_v0.15.3
        _flag(out, "--multi-latent-attention")
        if m.mla.q_lora_rank:  # 0: no query compression, Megatron's default None
            _flag(out, "--q-lora-rank", m.mla.q_lora_rank)
        _flag(out, "--kv-lora-rank", m.mla.kv_lora_rank)
        _flag(out, "--qk-head-dim", m.mla.qk_nope_head_dim)
        _flag(out, "--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim)
        _flag(out, "--v-head-dim", m.mla.v_head_dim)
    if m.attention is not None:  # _add_network_size_args, arguments.py:1571-1580 at core_v0.15.3
        if m.attention.sinks:
            _flag(out, "--softmax-type", "learnable")
        if m.attention.sliding_window is not None:  # window_size (w - 1, 0): w keys, the query itself included
            _flag(out, "--window-size", f"{m.attention.sliding_window - 1},0")
            if m.attention.full_attention_every is not None:
                _flag(out, "--window-attn-skip-freq", m.attention.full_attention_every)
    if m.num_mtp_layers:  # arguments.py:1666 at core_v0.15.3; validate_args needs rope position embeddings (1186-1190)
        _flag(out, "--mtp-num-layers", m.num_mtp_layers)
    return out


def _flex_backend(out: list[str], moe) -> None:
    """The flex dispatcher's backend and SMs: DeepEP as ``--moe-enable-deepep`` (core_v0.15.3 arguments.py:3135;
    still accepted, deprecated, through core_v0.19.0 transformer_config.py:1589-1598), HybridEP as
    ``--moe-flex-dispatcher-backend hybridep`` (the config dataclass's flag from core_v0.16.0, 3df20090; with
    ``--moe-enable-deepep`` Megatron refuses it, "Only one backend"), ``dispatcher_sms`` as ``--moe-deepep-num-sms``
    (arguments.py:3137 at core_v0.15.3) or ``--moe-hybridep-num-sms`` (core_v0.16.0), both routed to
    ``moe_flex_dispatcher_num_sms`` at core_v0.19.0 (transformer_config.py:1792-1810)."""
    hybrid = moe.dispatcher_backend == "hybridep"
    if hybrid:
        _flag(out, "--moe-flex-dispatcher-backend", "hybridep")
    else:
        _flag(out, "--moe-enable-deepep")
    if moe.dispatcher_sms is not None:
        _flag(out, "--moe-hybridep-num-sms" if hybrid else "--moe-deepep-num-sms", moe.dispatcher_sms)


def parallel_args(s: MegatronSettings) -> list[str]:
    out: list[str] = []
    _flag(out, "--tensor-model-parallel-size", s.tp)
    _flag(out, "--pipeline-model-parallel-size", s.pp)
    _flag(out, "--context-parallel-size", s.cp)
    if s.cp_comm_type is not None:
        _flag(out, "--cp-comm-type", s.cp_comm_type)
    if s.hierarchical_cp_sizes is not None:
        out += ["--hierarchical-context-parallel-sizes", *map(str, s.hierarchical_cp_sizes)]  # nargs='+'
    if s.ep is not None:
        _flag(out, "--expert-model-parallel-size", s.ep)
        _flag(out, "--expert-tensor-parallel-size", s.etp)
    if s.num_layers_per_virtual_stage is not None:
        _flag(out, "--num-layers-per-virtual-pipeline-stage", s.num_layers_per_virtual_stage)
    if s.num_virtual_stages_per_rank is not None:
        _flag(out, "--num-virtual-stages-per-pipeline-rank", s.num_virtual_stages_per_rank)
    if s.first_stage_layers is not None:
        _flag(out, "--decoder-first-pipeline-num-layers", s.first_stage_layers)
        _flag(out, "--decoder-last-pipeline-num-layers", s.last_stage_layers)
    if s.layout is not None:
        _flag(out, "--pipeline-model-parallel-layout", s.layout)
    if s.sequence_parallel:
        _flag(out, "--sequence-parallel")
    if s.tp_comm_overlap:
        _flag(out, "--tp-comm-overlap")
    if s.distributed_optimizer:
        _flag(out, "--use-distributed-optimizer")
    if s.fsdp_sharding_strategy is not None:
        _flag(out, "--use-megatron-fsdp")
        _flag(out, "--data-parallel-sharding-strategy", s.fsdp_sharding_strategy)
        _flag(out, "--ckpt-format", "fsdp_dtensor")
    if s.overlap_grad_reduce:
        _flag(out, "--overlap-grad-reduce")
    if s.overlap_param_gather:
        _flag(out, "--overlap-param-gather")
    if s.num_distributed_optimizer_instances is not None:
        _flag(out, "--num-distributed-optimizer-instances", s.num_distributed_optimizer_instances)
    if s.optimizer_dtypes is not None:
        main, m1, m2 = s.optimizer_dtypes
        _flag(out, "--use-precision-aware-optimizer")
        _flag(out, "--main-params-dtype", main)
        _flag(out, "--exp-avg-dtype", m1)
        _flag(out, "--exp-avg-sq-dtype", m2)
    if s.optimizer_offload_fraction is not None:
        _flag(out, "--optimizer-cpu-offload")
        _flag(out, "--optimizer-offload-fraction", f"{s.optimizer_offload_fraction:g}")
        if s.overlap_cpu_optimizer_d2h_h2d:
            _flag(out, "--overlap-cpu-optimizer-d2h-h2d")
    if s.overlap_moe_expert_parallel_comm:
        _flag(out, "--overlap-moe-expert-parallel-comm")
    if s.cpu_offloading_num_layers is not None:
        _flag(out, "--cpu-offloading-num-layers", s.cpu_offloading_num_layers)
    return out


def training_args(spec: Spec, s: MegatronSettings) -> list[str]:
    out: list[str] = []
    _flag(out, "--micro-batch-size", s.micro_batch_size)
    _flag(out, "--global-batch-size", s.global_batch_size)
    if s.recompute_granularity is not None:
        _flag(out, "--recompute-granularity", s.recompute_granularity)
    if s.recompute_method is not None:
        _flag(out, "--recompute-method", s.recompute_method)
        _flag(out, "--recompute-num-layers", s.recompute_num_layers)
    _flag(out, "--bf16")
    if spec.training.precision == "fp8":
        _flag(out, "--fp8-format", "hybrid")
    return out


def model_arg_warnings(spec: Spec) -> list[str]:
    """The model features :func:`model_args` has no Megatron-LM flag for (Megatron-Bridge sets them in its model
    provider: export_bridge's own warnings)."""
    moe, out = spec.model.moe, []
    if moe is not None and moe.activation_clamp is not None:
        out.append(f"model.moe.activation_clamp {moe.activation_clamp}: Megatron-LM has no command-line flag for "
                   "TransformerConfig.activation_func_clamp_value (Megatron-LM 2a75ac12 megatron/training/arguments.py); "
                   "set it in the model's config (Megatron-Bridge's GPT-OSS provider sets 7.0), or the experts run "
                   "unclamped")
    if moe is not None and moe.expert_bias:
        out.append("model.moe.expert_bias: keep Megatron's linear biases on (do not pass --disable-bias-linear), as "
                   "the plan was priced with them")
    return out


def megatron_argument_groups(spec: Spec, plan: Plan) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """``[(array name, argv tokens)]`` and the warnings: the export without its text rendering."""
    s = megatron_settings(spec, plan)
    groups = [("MODEL_ARGS", model_args(spec)), ("MODEL_PARALLEL_ARGS", parallel_args(s)),
              ("TRAINING_ARGS", training_args(spec, s))]
    return groups, s.warnings + model_arg_warnings(spec)


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
        f"{spec.model.vocab_size}), optimizer, schedule, checkpointing, and family flags such as --normalization "
        "RMSNorm --position-embedding-type rope --disable-bias-linear for Llama-style models.",
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
