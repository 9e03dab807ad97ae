"""The spec and plan types: one of each, used by the cost model, the solver, the CLI and the service.

The YAML/JSON keys follow ``shared/spec/CONTRACT.md``; everything here is strict
(`extra="forbid"`, no silent type coercion) so a typo is an error naming the field, never a default.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator, model_validator

from parplan.costmodel.assumptions import AssumptionsSpec
from parplan.costmodel.hardware import lookup_gpu
from parplan.frameworks.profiles import apply_framework_assumptions, search_conflicts

Schedule = Literal["1f1b", "interleaved", "zb-h1", "dualpipe"]
Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp8"]
Objective = Literal["max_throughput", "min_memory", "min_gpus"]
FrameworkName = Literal["megatron-core", "megatron-bridge", "torchtitan", "deepspeed"]

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

    @model_validator(mode="after")
    def _top_k_fits(self) -> "MoESpec":
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k ({self.top_k}) must not exceed num_experts ({self.num_experts})")
        return self


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


class FrameworkSpec(_Strict):
    """``framework: {name: ..., version: ...}``; the profiles are in parplan.frameworks.profiles."""

    name: FrameworkName
    version: Optional[str] = Field(None, description="release, e.g. 0.13.0 or main; default: the newest profile")


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
    pipeline_layout: Optional[Union[str, list[list[str]], list[list[NonNegativeInt]]]] = Field(
        None, description="Megatron's --pipeline-model-parallel-layout string (e.g. 'Et*3|(tt|)*29,m|L'), its "
        "list-of-stages form, or decoder-layer counts per [stage][virtual chunk] (frameworks/layout.py)")


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
    pipeline_layout: Optional[list[list[NonNegativeInt]]] = None  # decoder layers per [stage][virtual chunk]

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
    framework: Optional[Union[FrameworkName, FrameworkSpec]] = Field(
        None, description="the framework that will run the job; omitted: framework-neutral")

    @model_validator(mode="before")
    @classmethod
    def _framework_conventions(cls, data: Any) -> Any:
        """The framework profile's memory knobs, under the user's own ``assumptions:`` (theirs win)."""
        return apply_framework_assumptions(data)

    @model_validator(mode="after")
    def _check(self) -> "Spec":
        if self.training.precision == "fp8" and self.cluster.peak_fp8_tflops is None \
                and lookup_gpu(self.cluster.gpu).peak_fp8_tflops is None:
            raise ValueError(f"training.precision fp8 needs FP8 tensor cores; {self.cluster.gpu} has none "
                             "(set cluster.peak_fp8_tflops or use bf16)")
        conflicts = search_conflicts(self)
        if conflicts:
            raise ValueError(conflicts[0])
        if self.objective == "min_gpus" and self.target_step_time_s is None and self.target_tokens_per_s is None:
            raise ValueError("objective min_gpus needs target_step_time_s or target_tokens_per_s")
        return self
