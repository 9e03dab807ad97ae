"""The spec: a whole request (:class:`Spec`: model, training batch, cluster, search space, assumptions, objective,
an optional plan, the framework), used by the cost model, the solver, the CLI and the service. Its sections live
beside it: the model (``costmodel/spec/model.py``), the cluster (``cluster.py``), the assumptions
(``assumptions.py``) and the plan types (``plan.py``), all re-exported here.

The YAML/JSON keys follow ``shared/spec/CONTRACT.md``; everything here is strict
(`extra="forbid"`, no silent type coercion) so a typo is an error naming the field, never a default.

Sizes have documented upper limits (the ``MAX_*`` constants, ``costmodel/spec/spec_base.py``), generous for any real model and
cluster, so no accepted value overflows a later computation: a larger value is an error naming the field
and the limit. Rules across fields (errors): a cluster larger than one node is whole nodes; one target
(step time or tokens/s), not both; ``search.ep``/``search.etp`` only for MoE models. Settings that are
accepted but have no effect are reported by :func:`spec_warnings` (the CLI prints them to stderr).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import (Field, NonNegativeInt, PositiveInt, PrivateAttr, ValidationInfo, field_validator,
                      model_validator)

from parplan.costmodel.spec.assumptions import AssumptionsSpec
from parplan.costmodel.spec.spec_base import (  # noqa: F401  (re-exported: the limits and section bases)
    MAX_ATTENTION_HEADS, MAX_BANDWIDTH_GBPS, MAX_EXPERTS, MAX_GLOBAL_BATCH_SIZE, MAX_GPUS_PER_NODE, MAX_HIDDEN_SIZE,
    MAX_LATENCY_US, MAX_MEMORY_GIB, MAX_NUM_GPUS, MAX_NUM_LAYERS, MAX_PEAK_TFLOPS, MAX_SEQ_LEN, MAX_VOCAB_SIZE,
    LimitedSection, StrictModel, at_most, limit_text)
from parplan.costmodel.spec.cluster import POOL_REPLACED_KEYS, ClusterSpec, PoolSpec  # noqa: F401
from parplan.costmodel.spec.hardware import lookup_gpu
from parplan.costmodel.spec.model import AttentionSpec, MLASpec, ModelSpec, MoESpec  # noqa: F401  (re-exported)
from parplan.costmodel.spec.optimizer_states import OptimizerStates
from parplan.costmodel.spec.plan import (  # noqa: F401  (re-exported: the plan types and their values)
    ALL_SCHEDULES, CP_COMM_TYPES, RECOMPUTE_GRANULARITIES, SCHEDULES, CpCommType, Plan, PlanSpec, Recompute,
    ScheduleField)
from parplan.costmodel.spec.framework_binding import BoundFramework, UnboundSpec, loader_of

Precision = Literal["bf16", "fp8"]
Objective = Literal["max_throughput", "min_memory", "min_gpus"]
FrameworkName = Literal["megatron-core", "megatron-bridge", "torchtitan", "deepspeed", "megatron-lm", "llm-foundry"]
DEFAULT_FRAMEWORK = "megatron-core"  # ``framework:`` omitted (its newest profile); ``any``: the research space


def default_framework(assumptions: Any) -> str:
    """``framework`` when omitted: :data:`DEFAULT_FRAMEWORK`; ``any`` under ``preset: textbook`` (the seeds' neutral
    conventions, which a profile's memory knobs would overwrite)."""
    preset = assumptions.get("preset") if isinstance(assumptions, dict) else getattr(assumptions, "preset", None)
    return "any" if preset == "textbook" else DEFAULT_FRAMEWORK


class TrainingSpec(LimitedSection):
    LIMITS: ClassVar[dict[str, float]] = {"seq_len": MAX_SEQ_LEN, "global_batch_size": MAX_GLOBAL_BATCH_SIZE}

    seq_len: PositiveInt
    global_batch_size: PositiveInt = Field(description="sequences per optimizer step")
    precision: Precision = "bf16"


class SearchSpec(LimitedSection):
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
    memory_band: bool = Field(
        True, description="a plan fits only if the upper end of its peak-memory band fits (the band of the "
        "calibration the prediction rests on, costmodel/evaluation/prediction_band.py): a memory margin of "
        "usable x (1 - the low predicted/measured quantile), stated in the answer; memory_margin_gib above 0 "
        "overrides it, and so does --memory-margin (any value, 0 included); false: a plan fits if its predicted "
        "peak fits; default true")
    rank_by: Literal["point", "upper"] = Field(
        "point", description="order of the plans returned: point (the predicted step time) or upper (the upper end "
        "of its step-time band; the best plans by point are searched, then ordered); default point")
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


class FrameworkSpec(StrictModel):
    """``framework: {name: ..., version: ...}``; the profiles are in parplan.frameworks.profiles."""

    name: FrameworkName
    version: Optional[str] = Field(None, description="release, e.g. 0.13.0 or main (megatron-lm: a main-branch "
                                   "date YYYY-MM-DD or tag v2.0/v2.5/v2.6); default: the newest profile")


class Spec(StrictModel):
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
    # the calibrate profile whose assumptions the spec took (library/profile.py), for the prediction bands
    _calibration_profile: Optional[dict[str, Any]] = PrivateAttr(None)

    @property
    def calibration_profile(self) -> Optional[dict[str, Any]]:
        """The ``profile:`` the spec's assumptions came from (None: the default calibration)."""
        return self._calibration_profile

    @model_validator(mode="before")
    @classmethod
    def _framework_conventions(cls, data: Any, info: ValidationInfo) -> Any:
        """The framework (omitted or null: :data:`DEFAULT_FRAMEWORK`) and its profile's memory knobs, under the
        user's own ``assumptions:`` (theirs win), merged by the loader in the validation context."""
        if isinstance(data, dict) and data.get("framework") is None:
            data = {**data, "framework": default_framework(data.get("assumptions"))}
        return loader_of(info.context).apply_conventions(data)

    def at_gpus(self, num_gpus: int) -> "Spec":
        """This spec on ``num_gpus`` GPUs (``cluster.num_gpus`` replaced; the spec itself when it already has that
        count): one point of a search over GPU counts (the GPU frontier, the relaxations, a replan)."""
        if num_gpus == self.cluster.num_gpus:
            return self
        return self.model_copy(update={"cluster": self.cluster.model_copy(update={"num_gpus": num_gpus})})

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
        conflicts = self._bound.model_conflicts(self.model) + self._bound.search_conflicts(self.search)
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
