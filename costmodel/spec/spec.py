"""The spec and plan types: one of each, used by the cost model, the solver, the CLI and the service.

The YAML/JSON keys follow ``shared/spec/CONTRACT.md``; everything here is strict
(`extra="forbid"`, no silent type coercion) so a typo is an error naming the field, never a default.

Sizes have documented upper limits (the ``MAX_*`` constants, ``costmodel/spec/spec_base.py``), generous for any real model and
cluster, so no accepted value overflows a later computation: a larger value is an error naming the field
and the limit. Rules across fields (errors): a cluster larger than one node is whole nodes; one target
(step time or tokens/s), not both; ``search.ep``/``search.etp`` only for MoE models. Settings that are
accepted but have no effect are reported by :func:`spec_warnings` (the CLI prints them to stderr).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, Union

from pydantic import (AfterValidator, Field, NonNegativeInt, PlainSerializer, PositiveInt, PrivateAttr, ValidationInfo,
                      field_validator, model_validator)

from parplan.costmodel.spec.assumptions import AssumptionsSpec
from parplan.costmodel.spec.spec_base import (  # noqa: F401  (re-exported: the limits and section bases)
    MAX_ATTENTION_HEADS, MAX_BANDWIDTH_GBPS, MAX_EXPERTS, MAX_GLOBAL_BATCH_SIZE, MAX_GPUS_PER_NODE, MAX_HIDDEN_SIZE,
    MAX_LATENCY_US, MAX_MEMORY_GIB, MAX_NUM_GPUS, MAX_NUM_LAYERS, MAX_PEAK_TFLOPS, MAX_SEQ_LEN, MAX_VOCAB_SIZE,
    _Limited, _Strict, _at_most, _limit_text)
from parplan.costmodel.spec.cluster import POOL_REPLACED_KEYS, ClusterSpec, PoolSpec  # noqa: F401
from parplan.costmodel.spec.degrees import Choice, ParallelDims, chunk_trims_of
from parplan.costmodel.spec.hardware import lookup_gpu
from parplan.costmodel.spec.optimizer_states import OptimizerStates
from parplan.costmodel.schedules.schedule import SEARCHED_BY_DEFAULT, Schedule
from parplan.costmodel.spec.framework_binding import BoundFramework, UnboundSpec, loader_of

# a schedule field: parsed from the spec's strings (the values of costmodel/schedules/schedule.py Schedule, checked as a
# Literal, so the error and the JSON schema list them inline) into the Schedule it names, dumped as that string
ScheduleField = Annotated[Literal[tuple(s.value for s in Schedule)],  # type: ignore[valid-type]
                          AfterValidator(Schedule), PlainSerializer(lambda s: s.value, return_type=str)]
Recompute = Literal["none", "selective", "full"]
# Megatron-Core --cp-comm-type (costmodel/communication/context_parallel.py): the ring, Ulysses all-to-all, KV all-gather,
# all-to-all within an NVLink domain and a ring across them
CpCommType = Literal["p2p", "a2a", "allgather", "a2a+p2p"]
Precision = Literal["bf16", "fp8"]
Objective = Literal["max_throughput", "min_memory", "min_gpus"]
FrameworkName = Literal["megatron-core", "megatron-bridge", "torchtitan", "deepspeed", "megatron-lm", "llm-foundry"]
DEFAULT_FRAMEWORK = "megatron-core"  # ``framework:`` omitted (its newest profile); ``any``: the research space


def default_framework(assumptions: Any) -> str:
    """``framework`` when omitted: :data:`DEFAULT_FRAMEWORK`; ``any`` under ``preset: textbook`` (the seeds' neutral
    conventions, which a profile's memory knobs would overwrite)."""
    preset = assumptions.get("preset") if isinstance(assumptions, dict) else getattr(assumptions, "preset", None)
    return "any" if preset == "textbook" else DEFAULT_FRAMEWORK

# the default search space; 'dualpipev' (costmodel/schedules/dualpipev.py) is searched only when search.schedules names it
SCHEDULES: tuple[Schedule, ...] = SEARCHED_BY_DEFAULT
ALL_SCHEDULES: tuple[Schedule, ...] = tuple(Schedule)
RECOMPUTE_GRANULARITIES: tuple[Recompute, ...] = ("none", "selective", "full")
CP_COMM_TYPES: tuple[CpCommType, ...] = ("p2p", "a2a", "allgather", "a2a+p2p")


class MoESpec(_Limited):
    """Mixture-of-experts layers (Megatron naming: --num-experts, --moe-router-topk, ...)."""

    LIMITS: ClassVar[dict[str, float]] = {
        "num_experts": MAX_EXPERTS, "num_shared_experts": MAX_EXPERTS,
        "expert_ffn_hidden_size": MAX_HIDDEN_SIZE, "shared_expert_ffn_hidden_size": MAX_HIDDEN_SIZE}

    num_experts: PositiveInt
    top_k: PositiveInt
    expert_ffn_hidden_size: PositiveInt
    num_shared_experts: int = Field(0, ge=0)
    shared_expert_ffn_hidden_size: Optional[PositiveInt] = Field(
        None, description="width of one shared expert; default: expert_ffn_hidden_size"
    )
    first_dense_layers: int = Field(0, ge=0, description="leading layers that are dense, not MoE")
    max_nodes_per_token: Optional[PositiveInt] = Field(
        None, description="node-limited routing: a token's experts lie on at most this many nodes, reached "
        "once each over the network and fanned out over NVLink (DeepSeek-V3 §3.2.2: 4); None: unrestricted. It "
        "saves network crossings only under dispatcher flex (DeepEP/HybridEP), and only where it binds (fewer than "
        "the EP group's nodes; costmodel/moe/moe_dispatch.py)")
    dispatcher: Literal["alltoall", "allgather", "flex"] = Field(
        "alltoall", description="token dispatcher (Megatron-Core --moe-token-dispatcher-type): 'alltoall' (NCCL "
        "all-to-all: one network copy per remote expert; torchtitan expert_parallel_comm_backend 'standard', "
        "DeepSpeed-MoE's _AllToAll), 'flex' (DeepEP/HybridEP: one network copy per remote node holding one of the "
        "token's experts), 'allgather' (every rank gathers the EP group's tokens); costmodel/moe/moe_dispatch.py")
    dispatcher_backend: Literal["deepep", "hybridep"] = Field(
        "deepep", description="backend of dispatcher 'flex' (Megatron-Core --moe-flex-dispatcher-backend; "
        "torchtitan expert_parallel_comm_backend 'deepep' | 'hybridep'); both send a token once per remote node")
    capacity_factor: Optional[float] = Field(
        None, gt=0, description="expert capacity factor (Megatron-Core --moe-expert-capacity-factor, DeepSpeed-MoE "
        "capacity_factor): tokens beyond this x the mean per expert are dropped, so the busiest EP rank receives at "
        "most this x the mean; None: no token dropping")
    dispatcher_sms: Optional[PositiveInt] = Field(
        None, le=1024, description="SMs the dispatch/combine kernels hold while they run beside compute under an "
        "overlapped schedule (DualPipe, DualPipeV, plan.moe_a2a_overlap): Megatron-Core --moe-deepep-num-sms / "
        "--moe-hybridep-num-sms (--moe-flex-dispatcher-num-sms from core_v0.19.0), DeepEP Buffer.num_sms; None: 20, "
        "DeepEP's default and DeepSeek-V3's (§3.2.2). Of the GPU's SMs (costmodel/moe/moe_comm.py sm_fraction)")
    activation_clamp: Optional[float] = Field(
        None, gt=0, le=1e6, description="the experts' gated activation clamps its inputs to this value (GPT-OSS: "
        "7.0, config.json swiglu_limit; Megatron-Core activation_func_clamp_value, set by Megatron-Bridge "
        "models/gpt_oss/gpt_oss_bridge.py:83 at 067f987d): Megatron-Core runs the clamp as separate elementwise "
        "kernels before its fused activation (costmodel/moe/expert_elementwise.py); None: no clamp")
    expert_bias: bool = Field(
        False, description="the routed experts' linear layers carry biases (GPT-OSS; Megatron-Core add_bias_linear): "
        "the second one is added per expert, scaled by the routing weight, by separate elementwise kernels "
        "(costmodel/moe/expert_elementwise.py); the first is fused into the activation")

    @model_validator(mode="after")
    def _top_k_fits(self) -> "MoESpec":
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) must not exceed num_experts ({self.num_experts})")
        return self


class MLASpec(_Strict):
    """Multi-head latent attention (DeepSeek-V2/V3; names as in DeepSeek-V3's config.json).

    Queries: h -> q_lora_rank (0: no query compression) -> heads x (qk_nope_head_dim + qk_rope_head_dim);
    keys/values: h -> kv_lora_rank + qk_rope_head_dim, then kv_lora_rank -> heads x (qk_nope_head_dim +
    v_head_dim); output: heads x v_head_dim -> h.
    """

    q_lora_rank: int = Field(ge=0, description="query compression rank (DeepSeek-V3: 1536); 0: none")
    kv_lora_rank: PositiveInt = Field(description="key/value compression rank (DeepSeek-V3: 512)")
    qk_nope_head_dim: PositiveInt = Field(description="per-head query/key width without RoPE (128)")
    qk_rope_head_dim: int = Field(ge=0, description="per-head decoupled RoPE width, key shared by heads (64)")
    v_head_dim: PositiveInt = Field(description="per-head value width (128)")


class AttentionSpec(_Limited):
    """Attention variants that change the attention core's work, not its weights (GPT-OSS: every other layer a
    128-token sliding window, learned per-head sink logits).

    Megatron-Core names (3rdparty/Megatron-LM of Megatron-Bridge 067f987d = Megatron-LM 2a75ac12): ``window_size``
    (w - 1, 0) and ``window_attn_skip_freq`` N, "one full attention layer after (N-1) SWA layers"
    (transformer/transformer_config.py:244-247; transformer/utils.py:531-542: layer_number, 1-indexed, is windowed
    iff ``layer_number % N != 0``); sinks are ``softmax_type: learnable`` (Megatron-Bridge 067f987d
    models/gpt_oss/gpt_oss_bridge.py:86-88 sets all three for GPT-OSS from its config.json)."""

    LIMITS: ClassVar[dict[str, float]] = {"sliding_window": MAX_SEQ_LEN, "full_attention_every": MAX_NUM_LAYERS}

    sliding_window: Optional[PositiveInt] = Field(
        None, description="keys a windowed layer's query attends to, itself included (config.json sliding_window; "
        "Megatron-Core window_size = (sliding_window - 1, 0)); None: every layer full causal attention")
    full_attention_every: Optional[PositiveInt] = Field(
        None, description="Megatron-Core window_attn_skip_freq N: layer l (1-indexed) has full attention iff "
        "l % N == 0 (GPT-OSS: 2); None: every layer windowed")
    sinks: bool = Field(False, description="learned per-head sink logits in the softmax (GPT-OSS; Megatron-Core "
                        "softmax_type 'learnable'): keeps the attention core off FlashAttention and FP8 attention "
                        "(Transformer Engine v2.14 attention/dot_product_attention/utils.py:728-736); runs on "
                        "cuDNN fused attention in BF16 (cuDNN >= 9.13.1, common/fused_attn/fused_attn.cpp:460-465)")

    @model_validator(mode="after")
    def _pattern_needs_window(self) -> "AttentionSpec":
        if self.full_attention_every is not None and self.sliding_window is None:
            raise ValueError("attention.full_attention_every needs attention.sliding_window")
        return self


class ModelSpec(_Limited):
    LIMITS: ClassVar[dict[str, float]] = {
        "num_layers": MAX_NUM_LAYERS, "hidden_size": MAX_HIDDEN_SIZE, "ffn_hidden_size": MAX_HIDDEN_SIZE,
        "head_dim": MAX_HIDDEN_SIZE, "num_attention_heads": MAX_ATTENTION_HEADS,
        "num_kv_heads": MAX_ATTENTION_HEADS, "vocab_size": MAX_VOCAB_SIZE}

    name: str = "model"
    num_layers: PositiveInt
    hidden_size: PositiveInt
    ffn_hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: Optional[PositiveInt] = Field(None, description="GQA groups; default: num_attention_heads (MHA)")
    head_dim: Optional[PositiveInt] = Field(None, description="default: hidden_size / num_attention_heads")
    vocab_size: PositiveInt
    gated_mlp: bool = True
    tie_embeddings: bool = False
    moe: Optional[MoESpec] = None
    mla: Optional[MLASpec] = Field(None, description="multi-head latent attention; None: MHA/GQA")
    attention: Optional[AttentionSpec] = Field(None, description="sliding-window layers and attention sinks; None: "
                                               "full causal attention in every layer")
    num_mtp_layers: int = Field(0, ge=0, description="multi-token prediction modules on the last stage "
                                "(DeepSeek-V3 §2.2: 1), each a projection and one transformer layer sharing "
                                "the embedding and the output head")

    @model_validator(mode="after")
    def _shapes_consistent(self) -> "ModelSpec":
        kv = self.num_kv_heads or self.num_attention_heads
        if self.num_attention_heads % kv:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by num_kv_heads ({kv})"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}) unless head_dim is given"
            )
        if self.moe is not None and self.moe.first_dense_layers > self.num_layers:
            raise ValueError("moe.first_dense_layers must not exceed num_layers")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


class TrainingSpec(_Limited):
    LIMITS: ClassVar[dict[str, float]] = {"seq_len": MAX_SEQ_LEN, "global_batch_size": MAX_GLOBAL_BATCH_SIZE}

    seq_len: PositiveInt
    global_batch_size: PositiveInt = Field(description="sequences per optimizer step")
    precision: Precision = "bf16"


class SearchSpec(_Limited):
    """Restrictions of the search space; None means every legal value."""

    LIMITS: ClassVar[dict[str, float]] = {
        **dict.fromkeys(("tp", "cp", "pp", "ep", "etp", "dp", "max_num_gpus"), MAX_NUM_GPUS),
        "micro_batch_size": MAX_GLOBAL_BATCH_SIZE, "vpp": MAX_NUM_LAYERS, "activation_offload_layers": MAX_NUM_LAYERS}

    tp: Optional[list[PositiveInt]] = None
    cp: Optional[list[PositiveInt]] = None
    pp: Optional[list[PositiveInt]] = None
    ep: Optional[list[PositiveInt]] = None
    etp: Optional[list[PositiveInt]] = None
    dp: Optional[list[PositiveInt]] = None
    micro_batch_size: Optional[list[PositiveInt]] = None
    vpp: Optional[list[PositiveInt]] = None
    schedules: Optional[list[ScheduleField]] = None
    uneven_stages: bool = True
    stage_split: Optional[Literal["per_stage", "first_last", "even"]] = Field(
        None, description="how layer counts vary across stages: per_stage (default), first_last (middle stages "
                          "share one count) or even; uneven_stages: false means even")
    zero_stages: Optional[list[Literal[0, 1, 2, 3]]] = None
    recompute: Optional[list[Recompute]] = None
    uniform_recompute: bool = False
    sequence_parallel: Optional[list[bool]] = None
    cp_comm_types: Optional[list[CpCommType]] = Field(
        None, description="CP attention communication to consider when cp > 1: p2p (KV ring), a2a (Ulysses "
                          "all-to-all over heads), allgather (KV all-gather), a2a+p2p (a2a within an NVLink domain, "
                          "ring across domains); default [p2p]")
    moe_fp8_dispatch: Optional[list[bool]] = Field(
        None, description="MoE only: dispatch tokens to the experts in FP8 (1 byte per element plus one fp32 "
        "scale per 128, DeepEP; the combine stays BF16); default [false]: assumptions.ep_dispatch_bytes")
    moe_a2a_overlap: Optional[list[bool]] = Field(
        None, description="MoE only: hide the EP all-to-all behind another micro-batch's compute (Megatron-Core "
        "--overlap-moe-expert-parallel-comm; pp 1 or interleaved); default: both for an MoE model where the framework "
        "runs it (Megatron-Core >= 0.15, the research space; solver/space.py default_a2a_overlap), else [false]")
    max_num_gpus: Optional[PositiveInt] = Field(None, description="min_gpus objective: largest GPU count to try")
    # memory-side dimensions; unset, each keeps today's single value (not every legal value)
    zero_replicas: Optional[list[PositiveInt]] = Field(
        None, description="HSDP: replica groups of the ZeRO/FSDP group (its DP·CP ranks split into this many shard "
        "groups of DP·CP/zero_replicas ranks; model states sharded within one, replicated across); default [1]")
    optimizer_states: Optional[list[OptimizerStates]] = Field(
        None, description="precision-aware optimizer states 'MAIN/EXP_AVG/EXP_AVG_SQ' (Megatron-Core "
        "--main-params-dtype fp32|fp16, --exp-avg(-sq)-dtype fp32|fp16|bf16|fp8), e.g. fp32/bf16/bf16; default: "
        "assumptions.optimizer_bytes only")
    optimizer_offload_fractions: Optional[list[float]] = Field(
        None, description="shares of the optimizer states offloaded to the host, each in [0, 1] (Megatron-Core "
        "--optimizer-offload-fraction, DeepSpeed offload_optimizer ratio); default [0]")
    memory_margin_gib: float = Field(
        0.0, ge=0.0, le=4096.0, allow_inf_nan=False,
        description="GiB per GPU kept free below the usable memory (a safety margin the user controls); default 0")
    activation_offload_layers: Optional[list[NonNegativeInt]] = Field(
        None, description="activation CPU offload: numbers of transformer layers (the first ones) whose saved "
        "activations go to host memory between their forward and backward, each in [0, num_layers - 1] "
        "(Megatron-Core --cpu-offloading-num-layers; pp 1 and no recompute only, costmodel/evaluation/activation_offload.py); "
        "default [0]")

    @field_validator("optimizer_offload_fractions")
    @classmethod
    def _fractions(cls, value: Optional[list[float]]) -> Optional[list[float]]:
        for f in value or []:
            if not 0.0 <= f <= 1.0:
                raise ValueError(f"{f!r} is not a share: every optimizer offload fraction lies in [0, 1]")
        return value

    @property
    def resolved_stage_split(self) -> str:
        if self.stage_split is not None:
            return self.stage_split
        return "per_stage" if self.uneven_stages else "even"

    @model_validator(mode="after")
    def _lists_not_empty(self) -> "SearchSpec":
        if not self.uneven_stages and self.stage_split not in (None, "even"):
            raise ValueError(f"search.stage_split {self.stage_split!r} contradicts search.uneven_stages: false "
                             "(which means stage_split: even)")
        for name in ("tp", "cp", "pp", "ep", "etp", "dp", "micro_batch_size", "vpp", "schedules",
                     "zero_stages", "recompute", "sequence_parallel", "cp_comm_types", "zero_replicas",
                     "optimizer_states", "optimizer_offload_fractions", "activation_offload_layers",
                     "moe_fp8_dispatch", "moe_a2a_overlap"):
            value = getattr(self, name)
            if value is not None and len(value) == 0:
                raise ValueError(f"search.{name} must not be an empty list (omit it to allow every value)")
        return self


class FrameworkSpec(_Strict):
    """``framework: {name: ..., version: ...}``; the profiles are in parplan.frameworks.profiles."""

    name: FrameworkName
    version: Optional[str] = Field(None, description="release, e.g. 0.13.0 or main (megatron-lm: a main-branch "
                                   "date YYYY-MM-DD or tag v2.0/v2.5/v2.6); default: the newest profile")


class PlanSpec(_Limited):
    """The YAML form of a plan (``plan:`` in a spec). Omitted keys take defaults; see :class:`Plan`."""

    LIMITS: ClassVar[dict[str, float]] = {
        **dict.fromkeys(("tp", "cp", "pp", "dp", "ep", "etp"), MAX_NUM_GPUS),
        "micro_batch_size": MAX_GLOBAL_BATCH_SIZE, "num_microbatches": MAX_GLOBAL_BATCH_SIZE,
        **dict.fromkeys(("vpp", "stage_layers", "recompute_layers", "activation_offload_layers"), MAX_NUM_LAYERS)}

    tp: PositiveInt = 1
    cp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: Optional[PositiveInt] = Field(None, description="default: num_gpus / (tp*cp*pp)")
    ep: PositiveInt = 1
    etp: PositiveInt = 1
    micro_batch_size: PositiveInt = 1
    num_microbatches: Optional[PositiveInt] = Field(None, description="default: global_batch_size / (dp*mbs)")
    vpp: PositiveInt = 1
    schedule: ScheduleField = Schedule.ONE_F_ONE_B
    stage_layers: Optional[list[PositiveInt]] = None
    recompute: Recompute = "none"
    recompute_layers: Optional[list[int]] = None
    zero_stage: Literal[0, 1, 2, 3] = 1
    sequence_parallel: bool = True
    cp_comm_type: CpCommType = Field("p2p", description="CP attention communication (cp > 1): p2p | a2a | allgather "
                                                       "| a2a+p2p (Megatron --cp-comm-type)")
    zero_replicas: PositiveInt = Field(1, description="HSDP replica groups of the ZeRO group (1: shard over all of DP·CP)")
    optimizer_states: Optional[OptimizerStates] = Field(
        None, description="precision-aware optimizer dtypes MAIN/EXP_AVG/EXP_AVG_SQ; None: assumptions.optimizer_bytes")
    optimizer_offload_fraction: float = Field(0.0, ge=0.0, le=1.0, description="share of the optimizer states on the host")
    moe_fp8_dispatch: bool = Field(False, description="FP8 token dispatch to the experts (search.moe_fp8_dispatch)")
    moe_a2a_overlap: bool = Field(False, description="EP all-to-all overlapped with another micro-batch "
                                  "(search.moe_a2a_overlap; Megatron-Core --overlap-moe-expert-parallel-comm)")
    activation_offload_layers: NonNegativeInt = Field(
        0, description="layers whose saved activations are offloaded to the host (Megatron-Core "
        "--cpu-offloading-num-layers; costmodel/evaluation/activation_offload.py); 0: none")
    stage_pools: Optional[list[NonNegativeInt]] = Field(
        None, description="on cluster.pools: the pool index of each pipeline stage (issue 21, costmodel/evaluation/pools.py)")
    pipeline_layout: Optional[Union[str, list[list[str]], list[list[NonNegativeInt]]]] = Field(
        None, description="Megatron's --pipeline-model-parallel-layout string (e.g. 'Et*3|(tt|)*29,m|L'), its "
        "list-of-stages form, or decoder-layer counts per [stage][virtual chunk] (costmodel/spec/layout.py)")


class Plan(_Strict, ParallelDims):
    """The canonical, complete parallel plan (CONTRACT.md output ``plan``): a :class:`Choice` plus its stage
    split (``stage_layers``, ``recompute_layers``, ``pipeline_layout``). Degree products are
    :class:`ParallelDims`'s (``num_gpus``, ``dense_dp``, ``expert_dp``, ...), as on a Choice."""

    tp: PositiveInt
    cp: PositiveInt
    pp: PositiveInt
    dp: PositiveInt
    ep: PositiveInt
    etp: PositiveInt
    micro_batch_size: PositiveInt
    num_microbatches: PositiveInt
    vpp: PositiveInt
    schedule: ScheduleField
    stage_layers: list[PositiveInt]
    recompute: Recompute
    recompute_layers: list[int]
    zero_stage: Literal[0, 1, 2, 3]
    sequence_parallel: bool
    pipeline_layout: Optional[list[list[NonNegativeInt]]] = None  # decoder layers per [stage][virtual chunk]
    cp_comm_type: CpCommType = "p2p"  # CP attention communication; p2p whenever cp = 1 (the canonical form)
    zero_replicas: PositiveInt = 1  # HSDP replica groups (costmodel/evaluation/choice.py Choice.dense_shard)
    optimizer_states: Optional[OptimizerStates] = None  # costmodel/spec/optimizer_states.py; None: assumptions
    optimizer_offload_fraction: float = Field(0.0, ge=0.0, le=1.0)  # costmodel/memory/offload.py
    moe_fp8_dispatch: bool = False  # FP8 dispatch, BF16 combine (costmodel/evaluation/choice.py all_to_all_s)
    moe_a2a_overlap: bool = False  # Megatron-Core --overlap-moe-expert-parallel-comm
    activation_offload_layers: NonNegativeInt = 0  # --cpu-offloading-num-layers (costmodel/evaluation/activation_offload.py)
    stage_pools: Optional[list[NonNegativeInt]] = None  # on cluster.pools: each stage's pool (costmodel/evaluation/pools.py)

    def to_choice(self) -> Choice:
        """The plan's choice: every field a Choice has, and the chunk trims its ``pipeline_layout`` carries."""
        first, last = chunk_trims_of(self.pipeline_layout)
        return Choice(**{name: getattr(self, name) for name in _CHOICE_FIELDS}, first_chunk_trim=first,
                      last_chunk_trim=last)

    @classmethod
    def from_choice(cls, choice: Choice, stage_layers: list[int], recompute_layers: list[int],
                    pipeline_layout: Optional[list[list[int]]] = None, **changes: Any) -> "Plan":
        """The plan of ``choice`` with this stage split; ``changes`` override choice fields (e.g. a canonical
        ``recompute``)."""
        fields = {name: getattr(choice, name) for name in _CHOICE_FIELDS}
        return cls(**{**fields, **changes}, stage_layers=stage_layers, recompute_layers=recompute_layers,
                   pipeline_layout=pipeline_layout)


# the fields a Plan and a Choice share (a Choice adds the chunk trims, a Plan the stage split)
_CHOICE_FIELDS = tuple(name for name in Choice.__dataclass_fields__ if name in Plan.model_fields)


class Spec(_Strict):
    """A whole request: model, training batch, cluster, search space, assumptions, objective."""

    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    search: SearchSpec = SearchSpec()
    assumptions: AssumptionsSpec = AssumptionsSpec()
    objective: Objective = "max_throughput"
    target_step_time_s: Optional[float] = Field(None, gt=0, description="min_gpus: step time to meet")
    target_tokens_per_s: Optional[float] = Field(None, gt=0, description="min_gpus: throughput to meet")
    plan: Optional[PlanSpec] = None
    framework: Optional[Union[FrameworkName, Literal["any"], FrameworkSpec]] = Field(
        DEFAULT_FRAMEWORK, description=f"the framework that will run the job; omitted: {DEFAULT_FRAMEWORK} (its "
        "newest profile); 'any': framework-neutral (the research space: ZB-H1, DualPipe)")
    _bound: Optional[BoundFramework] = PrivateAttr(None)  # the loader's (costmodel/spec/framework_binding.py)

    @model_validator(mode="before")
    @classmethod
    def _framework_conventions(cls, data: Any, info: ValidationInfo) -> Any:
        """The framework (omitted or null: :data:`DEFAULT_FRAMEWORK`) and its profile's memory knobs, under the
        user's own ``assumptions:`` (theirs win), merged by the loader in the validation context."""
        if isinstance(data, dict) and data.get("framework") is None:
            data = {**data, "framework": default_framework(data.get("assumptions"))}
        return loader_of(info.context).apply_conventions(data)

    @property
    def bound_framework(self) -> BoundFramework:
        """The spec's framework resolved by the loader (costmodel/spec/framework_binding.py)."""
        if self._bound is None:
            raise UnboundSpec("this Spec was not validated by the loader (parplan.frameworks.loader.validate_spec)")
        return self._bound

    @field_validator("target_tokens_per_s")
    @classmethod
    def _one_target(cls, value: Optional[float], info) -> Optional[float]:
        if value is not None and info.data.get("target_step_time_s") is not None:
            raise ValueError("give one target, target_step_time_s or target_tokens_per_s, not both "
                             "(they state the same requirement twice)")
        return value

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> "Spec":
        self._bound = loader_of(info.context).bind(self.framework)
        for where, cl in ([(f"cluster.pools[{k}].", p) for k, p in enumerate(self.cluster.pools)]
                          if self.cluster.pools else [("cluster.", self.cluster)]):
            if self.training.precision == "fp8" and cl.peak_fp8_tflops is None \
                    and lookup_gpu(cl.gpu).peak_fp8_tflops is None:
                raise ValueError(f"training.precision fp8 needs FP8 tensor cores; {cl.gpu} has none "
                                 f"(set {where}peak_fp8_tflops or use bf16)")
        conflicts = self._bound.search_conflicts(self.search)
        if conflicts:
            raise ValueError(conflicts[0])
        if self.objective == "min_gpus" and self.target_step_time_s is None and self.target_tokens_per_s is None:
            raise ValueError("objective min_gpus needs target_step_time_s or target_tokens_per_s")
        L = self.model.num_layers
        for where, values in (("search", self.search.activation_offload_layers or []),
                              ("plan", [self.plan.activation_offload_layers] if self.plan is not None else [])):
            bad = [v for v in values if v >= L]
            if bad:
                raise ValueError(f"{where}.activation_offload_layers: {bad[0]} layers offloaded, but at least one of "
                                 f"model.num_layers = {L} must stay on the GPU (each value lies in [0, {L - 1}])")
        if self.model.moe is None:
            for name in ("ep", "etp"):
                values = getattr(self.search, name)
                if values is not None and any(v != 1 for v in values):
                    raise ValueError(f"search.{name}: {values} needs an MoE model (model.moe is not set); a dense "
                                     f"model has {name} = 1")
            for name in ("moe_fp8_dispatch", "moe_a2a_overlap"):
                values = getattr(self.search, name)
                if values is not None and any(values):
                    raise ValueError(f"search.{name}: {values} needs an MoE model (model.moe is not set); a dense "
                                     f"model has no expert all-to-all")
        return self


def spec_warnings(spec: Spec, *, pareto: Optional[str] = None) -> list[str]:
    """Settings the spec accepts but that have no effect on this request, one sentence each.

    * ``search.max_num_gpus`` is read by objective ``min_gpus`` and by the GPU-count frontier
      (``pareto="gpus"``) only;
    * ``target_step_time_s`` / ``target_tokens_per_s`` are read by objective ``min_gpus`` only.

    ``pareto`` is the frontier requested with the spec (``solver-cli optimize --pareto``), if any."""
    out = []
    if spec.objective != "min_gpus":
        if spec.search.max_num_gpus is not None and pareto != "gpus":
            out.append(f"search.max_num_gpus: ignored under objective {spec.objective} (it bounds the GPU "
                       "count of objective min_gpus and of the GPU-count frontier, --pareto gpus)")
        for name in ("target_step_time_s", "target_tokens_per_s"):
            if getattr(spec, name) is not None:
                out.append(f"{name}: ignored under objective {spec.objective} (only objective min_gpus "
                           "meets a target)")
    return out
