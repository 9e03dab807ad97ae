"""The spec and plan types: one of each, used by the cost model, the solver, the CLI and the service.

The YAML/JSON keys follow ``shared/spec/CONTRACT.md``; everything here is strict
(`extra="forbid"`, no silent type coercion) so a typo is an error naming the field, never a default.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from parplan.costmodel.assumptions import AssumptionsSpec
from parplan.costmodel.hardware import lookup_gpu

Schedule = Literal["1f1b", "interleaved", "zb-h1", "dualpipe"]
Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp8"]
Objective = Literal["max_throughput", "min_memory", "min_gpus"]

SCHEDULES: tuple[Schedule, ...] = ("1f1b", "interleaved", "zb-h1", "dualpipe")
RECOMPUTE_GRANULARITIES: tuple[Recompute, ...] = ("none", "selective", "full")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class MoESpec(_Strict):
    """Mixture-of-experts layers (Megatron naming: --num-experts, --moe-router-topk, ...)."""

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
        "once each over the network and fanned out over NVLink (DeepSeek-V3 §3.2.2: 4); None: unrestricted")

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


class ModelSpec(_Strict):
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


class TrainingSpec(_Strict):
    seq_len: PositiveInt
    global_batch_size: PositiveInt = Field(description="sequences per optimizer step")
    precision: Precision = "bf16"


class ClusterSpec(_Strict):
    """A catalog GPU plus optional per-field overrides (see costmodel.hardware.GPU for the fields)."""

    gpu: str
    num_gpus: PositiveInt
    gpus_per_node: PositiveInt = 8
    memory_gib: Optional[float] = Field(None, gt=0)
    peak_bf16_tflops: Optional[float] = Field(None, gt=0)
    peak_fp8_tflops: Optional[float] = Field(None, gt=0)
    nvlink_domain_size: Optional[PositiveInt] = None
    intra_node_bandwidth_gbps: Optional[float] = Field(None, gt=0, description="GB/s per GPU per direction")
    inter_node_bandwidth_gbps: Optional[float] = Field(None, gt=0, description="GB/s per GPU per direction")
    intra_node_latency_us: Optional[float] = Field(None, ge=0)
    inter_node_latency_us: Optional[float] = Field(None, ge=0)

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, name: str) -> str:
        lookup_gpu(name)
        return name


class SearchSpec(_Strict):
    """Restrictions of the search space; None means every legal value."""

    tp: Optional[list[PositiveInt]] = None
    cp: Optional[list[PositiveInt]] = None
    pp: Optional[list[PositiveInt]] = None
    ep: Optional[list[PositiveInt]] = None
    etp: Optional[list[PositiveInt]] = None
    dp: Optional[list[PositiveInt]] = None
    micro_batch_size: Optional[list[PositiveInt]] = None
    vpp: Optional[list[PositiveInt]] = None
    schedules: Optional[list[Schedule]] = None
    uneven_stages: bool = True
    zero_stages: Optional[list[Literal[0, 1, 2, 3]]] = None
    recompute: Optional[list[Recompute]] = None
    uniform_recompute: bool = False
    sequence_parallel: Optional[list[bool]] = None
    max_num_gpus: Optional[PositiveInt] = Field(None, description="min_gpus objective: largest GPU count to try")

    @model_validator(mode="after")
    def _lists_not_empty(self) -> "SearchSpec":
        for name in ("tp", "cp", "pp", "ep", "etp", "dp", "micro_batch_size", "vpp", "schedules",
                     "zero_stages", "recompute", "sequence_parallel"):
            value = getattr(self, name)
            if value is not None and len(value) == 0:
                raise ValueError(f"search.{name} must not be an empty list (omit it to allow every value)")
        return self


class PlanSpec(_Strict):
    """The YAML form of a plan (``plan:`` in a spec). Omitted keys take defaults; see :class:`Plan`."""

    tp: PositiveInt = 1
    cp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: Optional[PositiveInt] = Field(None, description="default: num_gpus / (tp*cp*pp)")
    ep: PositiveInt = 1
    etp: PositiveInt = 1
    micro_batch_size: PositiveInt = 1
    num_microbatches: Optional[PositiveInt] = Field(None, description="default: global_batch_size / (dp*mbs)")
    vpp: PositiveInt = 1
    schedule: Schedule = "1f1b"
    stage_layers: Optional[list[PositiveInt]] = None
    recompute: Recompute = "none"
    recompute_layers: Optional[list[int]] = None
    zero_stage: Literal[0, 1, 2, 3] = 1
    sequence_parallel: bool = True


class Plan(_Strict):
    """The canonical, complete parallel plan (CONTRACT.md output ``plan``)."""

    tp: PositiveInt
    cp: PositiveInt
    pp: PositiveInt
    dp: PositiveInt
    ep: PositiveInt
    etp: PositiveInt
    micro_batch_size: PositiveInt
    num_microbatches: PositiveInt
    vpp: PositiveInt
    schedule: Schedule
    stage_layers: list[PositiveInt]
    recompute: Recompute
    recompute_layers: list[int]
    zero_stage: Literal[0, 1, 2, 3]
    sequence_parallel: bool

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


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

    @model_validator(mode="after")
    def _check(self) -> "Spec":
        if self.training.precision == "fp8" and self.cluster.peak_fp8_tflops is None \
                and lookup_gpu(self.cluster.gpu).peak_fp8_tflops is None:
            raise ValueError(f"training.precision fp8 needs FP8 tensor cores; {self.cluster.gpu} has none "
                             "(set cluster.peak_fp8_tflops or use bf16)")
        if self.objective == "min_gpus" and self.target_step_time_s is None and self.target_tokens_per_s is None:
            raise ValueError("objective min_gpus needs target_step_time_s or target_tokens_per_s")
        return self
