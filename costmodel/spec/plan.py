"""The plan types: :class:`PlanSpec`, what a user may pin (``plan:`` in a spec, omitted keys defaulted), and
:class:`Plan`, the canonical, complete plan (CONTRACT.md output ``plan``), which converts to and from the solver's
:class:`~parplan.costmodel.spec.degrees.Choice`; with the value types their fields share with ``search:``.

A schedule field holds a :class:`~parplan.costmodel.schedules.schedule.Schedule`: parsed from the spec's string at
validation and dumped as that string, so YAML, JSON and the JSON schema read as before."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Optional, Union

from pydantic import AfterValidator, Field, NonNegativeInt, PlainSerializer, PositiveInt

from parplan.costmodel.schedules.schedule import SEARCHED_BY_DEFAULT, Schedule
from parplan.costmodel.spec.degrees import Choice, ParallelDims, chunk_trims_of
from parplan.costmodel.spec.optimizer_states import OptimizerStates
from parplan.costmodel.spec.spec_base import MAX_GLOBAL_BATCH_SIZE, MAX_NUM_GPUS, MAX_NUM_LAYERS, _Limited, _Strict

# a schedule field: parsed from the spec's strings (the values of costmodel/schedules/schedule.py Schedule, checked as a
# Literal, so the error and the JSON schema list them inline) into the Schedule it names, dumped as that string
ScheduleField = Annotated[Literal[tuple(s.value for s in Schedule)],  # type: ignore[valid-type]
                          AfterValidator(Schedule), PlainSerializer(lambda s: s.value, return_type=str)]
Recompute = Literal["none", "selective", "full"]
# Megatron-Core --cp-comm-type (costmodel/communication/context_parallel.py): the ring, Ulysses all-to-all, KV all-gather,
# all-to-all within an NVLink domain and a ring across them
CpCommType = Literal["p2p", "a2a", "allgather", "a2a+p2p"]

# the default search space; 'dualpipev' (costmodel/schedules/dualpipev.py) is searched only when search.schedules names it
SCHEDULES: tuple[Schedule, ...] = SEARCHED_BY_DEFAULT
ALL_SCHEDULES: tuple[Schedule, ...] = tuple(Schedule)
RECOMPUTE_GRANULARITIES: tuple[Recompute, ...] = ("none", "selective", "full")
CP_COMM_TYPES: tuple[CpCommType, ...] = ("p2p", "a2a", "allgather", "a2a+p2p")


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
