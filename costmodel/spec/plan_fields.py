"""The plan's fields, declared once: each a :class:`PlanField` record of :data:`PLAN_FIELDS`, from which
:class:`~parplan.costmodel.spec.plan.PlanSpec` (what a user may pin, ``plan:`` in a spec),
:class:`~parplan.costmodel.spec.plan.Plan` (the resolved plan, CONTRACT.md output ``plan``) and
:class:`~parplan.costmodel.spec.degrees.Choice` (the solver's unit) are built, in this order, and which
``resolve_plan``, ``Plan.to_choice`` / ``Plan.from_choice``, the CONTRACT dict and the proto edge iterate
(torchtitan declares its job config once, as dataclasses, and derives the CLI from them:
``torchtitan/config/job_config.py``).

A new plan knob is one record here, its cost (what reads it in the cost model) and its export (the frameworks'
arguments), plus its field in the ``.proto`` text; ``tests/costmodel/spec/test_plan_fields.py`` lists every
module that reads each field by name.

The value types the fields share with ``search:`` live here too: a schedule field holds a
:class:`~parplan.costmodel.schedules.schedule.Schedule`, parsed from the spec's string at validation and dumped as
that string, so YAML, JSON and the JSON schema read as before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, Field, NonNegativeInt, PlainSerializer, PositiveInt

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.optimizer_states import OptimizerStates
from parplan.costmodel.spec.spec_base import MAX_GLOBAL_BATCH_SIZE, MAX_NUM_GPUS, MAX_NUM_LAYERS

# a schedule field: parsed from the spec's strings (the values of costmodel/schedules/schedule.py Schedule, checked as a
# Literal, so the error and the JSON schema list them inline) into the Schedule it names, dumped as that string
ScheduleField = Annotated[Literal[tuple(s.value for s in Schedule)],  # type: ignore[valid-type]
                          AfterValidator(Schedule), PlainSerializer(lambda s: s.value, return_type=str)]
Recompute = Literal["none", "selective", "full"]
# Megatron-Core --cp-comm-type (costmodel/communication/context_parallel.py): the ring, Ulysses all-to-all, KV all-gather,
# all-to-all within an NVLink domain and a ring across them
CpCommType = Literal["p2p", "a2a", "allgather", "a2a+p2p"]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
# Megatron's --pipeline-model-parallel-layout string, its list-of-stages form, or decoder-layer counts per
# [stage][virtual chunk] (costmodel/spec/layout.py); a resolved plan holds the counts
LayoutForms = Optional[Union[str, list[list[str]], list[list[NonNegativeInt]]]]
DecoderLayout = Optional[list[list[NonNegativeInt]]]

REQUIRED: Any = ...  # a field with no default (pydantic's Ellipsis)
SAME: Any = object()  # a PlanSpec annotation or default that is the Plan's


@dataclass(frozen=True)
class PlanField:
    """One field of a plan and where it lives.

    ``type``/``default``: the resolved :class:`Plan`'s annotation and default (``type`` None: no Plan field);
    ``spec_type``/``spec_default``: the :class:`PlanSpec`'s (SAME: the Plan's; ``spec_type`` None: not pinnable);
    ``description``: the YAML schema's text; ``choice``/``choice_default``: the :class:`Choice`'s annotation
    (text) and default (None: not on a Choice); ``limit``: the documented maximum of a PlanSpec value
    (``spec_base.MAX_*``); ``search_key``: the ``search:`` list that restricts it (a pin in ``plan:`` narrows it
    to the pinned value, solver/completion.py); ``resolved``: ``resolve_plan`` computes the Plan's value (False: a
    straight copy of the PlanSpec's); ``shown_at_default``: False for the fields added after the first CONTRACT,
    left out of a plan's answer (dict, proto reply, job name) at their default so older answers read as before;
    ``spec_last``: declared last in a PlanSpec (its place in the YAML schema since it was added)."""

    name: str
    type: Any = None
    default: Any = REQUIRED
    spec_type: Any = SAME
    spec_default: Any = SAME
    description: Optional[str] = None
    choice: Optional[str] = None
    choice_default: Any = REQUIRED
    limit: Optional[float] = None
    search_key: Optional[str] = None
    resolved: bool = False
    shown_at_default: bool = True
    spec_last: bool = False

    def spec_definition(self) -> tuple[Any, Any]:
        """(annotation, default or FieldInfo) of the PlanSpec field."""
        default = self.default if self.spec_default is SAME else self.spec_default
        return (self.type if self.spec_type is SAME else self.spec_type,
                default if self.description is None else Field(default, description=self.description))

    def plan_definition(self) -> tuple[Any, Any]:
        """(annotation, default) of the Plan field."""
        return self.type, self.default


def _degree(name: str, **more: Any) -> PlanField:
    return PlanField(name, PositiveInt, **{"spec_default": 1, "choice": "int", "limit": MAX_NUM_GPUS,
                                           "search_key": name, **more})


PLAN_FIELDS: tuple[PlanField, ...] = (
    _degree("tp"), _degree("cp"), _degree("pp"),
    _degree("dp", spec_type=Optional[PositiveInt], spec_default=None, description="default: num_gpus / (tp*cp*pp)",
            resolved=True),
    _degree("ep", choice_default=1), _degree("etp", choice_default=1),
    PlanField("micro_batch_size", PositiveInt, spec_default=1, choice="int", choice_default=1,
              limit=MAX_GLOBAL_BATCH_SIZE, search_key="micro_batch_size"),
    PlanField("num_microbatches", PositiveInt, spec_type=Optional[PositiveInt], spec_default=None,
              description="default: global_batch_size / (dp*mbs)", choice="int", choice_default=1,
              limit=MAX_GLOBAL_BATCH_SIZE, resolved=True),
    PlanField("vpp", PositiveInt, spec_default=1, choice="int", choice_default=1, limit=MAX_NUM_LAYERS, resolved=True,
              search_key="vpp"),
    PlanField("schedule", ScheduleField, spec_default=Schedule.ONE_F_ONE_B, choice="Schedule",
              choice_default=Schedule.ONE_F_ONE_B, resolved=True, search_key="schedules"),
    PlanField("stage_layers", list[PositiveInt], spec_type=Optional[list[PositiveInt]], spec_default=None,
              limit=MAX_NUM_LAYERS, resolved=True),
    # granularity; 'full' uses per-stage recompute counts
    PlanField("recompute", Recompute, spec_default="none", choice="str", choice_default="none",
              search_key="recompute"),
    PlanField("recompute_layers", list[int], spec_type=Optional[list[int]], spec_default=None, limit=MAX_NUM_LAYERS,
              resolved=True),
    PlanField("zero_stage", Literal[0, 1, 2, 3], spec_default=1, choice="int", choice_default=1,
              search_key="zero_stages"),
    PlanField("sequence_parallel", bool, spec_default=True, choice="bool", choice_default=True, resolved=True,
              search_key="sequence_parallel"),
    PlanField("pipeline_layout", DecoderLayout, None, spec_type=LayoutForms, description=(
        "Megatron's --pipeline-model-parallel-layout string (e.g. 'Et*3|(tt|)*29,m|L'), its list-of-stages form, "
        "or decoder-layer counts per [stage][virtual chunk] (costmodel/spec/layout.py)"), resolved=True,
        shown_at_default=False, spec_last=True),
    # CP attention communication; p2p whenever cp = 1 (the canonical form)
    PlanField("cp_comm_type", CpCommType, "p2p", description="CP attention communication (cp > 1): p2p | a2a | "
              "allgather | a2a+p2p (Megatron --cp-comm-type)", choice="str", choice_default="p2p", resolved=True,
              search_key="cp_comm_types", shown_at_default=False),
    # interleaved: decoder layers fewer in stage 0's first model chunk and in the last stage's last chunk than in
    # their other chunks (Meta's Llama 3 405B split, Megatron's --pipeline-model-parallel-layout); the plan carries
    # them as its pipeline_layout. A search key of the stage split: the costs do not depend on them.
    PlanField("first_chunk_trim", spec_type=None, choice="int", choice_default=0),
    PlanField("last_chunk_trim", spec_type=None, choice="int", choice_default=0),
    # the memory-side dimensions: HSDP replica groups of the ZeRO group (costmodel/evaluation/choice.py
    # Choice.dense_shard), the optimizer states' dtypes (costmodel/spec/optimizer_states.py; None:
    # assumptions.optimizer_bytes), the share of the optimizer states offloaded (costmodel/memory/offload.py)
    PlanField("zero_replicas", PositiveInt, 1, description="HSDP replica groups of the ZeRO group (1: shard over all "
              "of DP·CP)", choice="int", choice_default=1, search_key="zero_replicas", shown_at_default=False),
    PlanField("optimizer_states", Optional[OptimizerStates], None, description="precision-aware optimizer dtypes "
              "MAIN/EXP_AVG/EXP_AVG_SQ; None: assumptions.optimizer_bytes", choice="str | None", choice_default=None,
              search_key="optimizer_states", shown_at_default=False),
    PlanField("optimizer_offload_fraction", Fraction, 0.0, description="share of the optimizer states on the host",
              choice="float", choice_default=0.0, search_key="optimizer_offload_fractions", shown_at_default=False),
    # FP8 token dispatch (1 B + an fp32 scale per 128 elements), BF16 combine (costmodel/moe/moe_comm.py)
    PlanField("moe_fp8_dispatch", bool, False, description="FP8 token dispatch to the experts "
              "(search.moe_fp8_dispatch)", choice="bool", choice_default=False, search_key="moe_fp8_dispatch",
              shown_at_default=False),
    PlanField("moe_a2a_overlap", bool, False, description="EP all-to-all overlapped with another micro-batch "
              "(search.moe_a2a_overlap; Megatron-Core --overlap-moe-expert-parallel-comm)", choice="bool",
              choice_default=False, search_key="moe_a2a_overlap", shown_at_default=False),
    PlanField("activation_offload_layers", NonNegativeInt, 0, description="layers whose saved activations are "
              "offloaded to the host (Megatron-Core --cpu-offloading-num-layers; "
              "costmodel/evaluation/activation_offload.py); 0: none", choice="int", choice_default=0,
              limit=MAX_NUM_LAYERS, search_key="activation_offload_layers", shown_at_default=False),
    PlanField("stage_pools", Optional[list[NonNegativeInt]], None, description="on cluster.pools: the pool index of "
              "each pipeline stage (issue 21, costmodel/evaluation/pools.py)", shown_at_default=False),
)
FIELDS_BY_NAME: dict[str, PlanField] = {f.name: f for f in PLAN_FIELDS}


def spec_fields() -> list[PlanField]:
    """The PlanSpec's fields in its order (those declared ``spec_last`` after the others)."""
    pinnable = [f for f in PLAN_FIELDS if f.spec_type is not None]
    return [f for f in pinnable if not f.spec_last] + [f for f in pinnable if f.spec_last]


ON_PLAN: tuple[PlanField, ...] = tuple(f for f in PLAN_FIELDS if f.type is not None)  # a Plan's fields, in order
ON_CHOICE: tuple[PlanField, ...] = tuple(f for f in PLAN_FIELDS if f.choice is not None)  # a Choice's, in order
# the fields a Plan and a Choice share (a Choice adds the chunk trims, a Plan the stage split)
SHARED_WITH_CHOICE: tuple[str, ...] = tuple(f.name for f in PLAN_FIELDS if f.type is not None and f.choice is not None)
# what resolve_plan copies from a PlanSpec unchanged (the rest it computes: defaults, layout, canonical forms)
COPIED_BY_RESOLVE: tuple[str, ...] = tuple(f.name for f in ON_PLAN if f.spec_type is not None and not f.resolved)
# plan field -> the search key that restricts it (solver/completion.py)
SEARCH_KEYS: dict[str, str] = {f.name: f.search_key for f in PLAN_FIELDS if f.search_key is not None}
# the PlanSpec's per-stage split: pinnable, not on a Choice
PER_STAGE: tuple[str, ...] = tuple(f.name for f in PLAN_FIELDS if f.spec_type is not None and f.choice is None)
LIMITS: dict[str, float] = {f.name: f.limit for f in PLAN_FIELDS if f.limit is not None and f.spec_type is not None}


def plan_defaults_hidden() -> dict[str, Any]:
    """Plan field -> its default, for the fields a plan's answer leaves out at that default."""
    return {f.name: f.default for f in ON_PLAN if not f.shown_at_default}


__all__ = ["PlanField", "PLAN_FIELDS", "FIELDS_BY_NAME", "spec_fields", "ON_PLAN", "ON_CHOICE", "SHARED_WITH_CHOICE",
           "COPIED_BY_RESOLVE", "SEARCH_KEYS", "PER_STAGE", "LIMITS", "plan_defaults_hidden", "ScheduleField",
           "Recompute", "CpCommType", "REQUIRED", "SAME"]
