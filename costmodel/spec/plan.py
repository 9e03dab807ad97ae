"""The plan types: :class:`PlanSpec`, what a user may pin (``plan:`` in a spec, omitted keys defaulted), and
:class:`Plan`, the canonical, complete plan (CONTRACT.md output ``plan``), which converts to and from the solver's
:class:`~parplan.costmodel.spec.degrees.Choice`; both built from the one declaration of the plan's fields
(:mod:`~parplan.costmodel.spec.plan_fields`, which also holds the value types their fields share with ``search:``).

A schedule field holds a :class:`~parplan.costmodel.schedules.schedule.Schedule`: parsed from the spec's string at
validation and dumped as that string, so YAML, JSON and the JSON schema read as before."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional  # noqa: F401  (Literal: the typing block)

from pydantic import create_model

from parplan.costmodel.schedules.schedule import SEARCHED_BY_DEFAULT, Schedule
from parplan.costmodel.spec.degrees import Choice, ParallelDims, chunk_trims_of
from parplan.costmodel.spec.plan_fields import (  # noqa: F401  (re-exported: the value types)
    LIMITS, ON_PLAN, SHARED_WITH_CHOICE, CpCommType, Recompute, ScheduleField, spec_fields)
from parplan.costmodel.spec.spec_base import LimitedSection, StrictModel

if TYPE_CHECKING:
    from parplan.costmodel.spec.optimizer_states import OptimizerStates
    from parplan.costmodel.spec.plan_fields import DecoderLayout, LayoutForms

# the default search space; 'dualpipev' (costmodel/schedules/dualpipev.py) is searched only when search.schedules names it
SCHEDULES: tuple[Schedule, ...] = SEARCHED_BY_DEFAULT
ALL_SCHEDULES: tuple[Schedule, ...] = tuple(Schedule)
RECOMPUTE_GRANULARITIES: tuple[Recompute, ...] = ("none", "selective", "full")
CP_COMM_TYPES: tuple[CpCommType, ...] = ("p2p", "a2a", "allgather", "a2a+p2p")


class _PlanSpecLimits(LimitedSection):
    """The PlanSpec's documented maxima (``spec_base.MAX_*``), from the declaration."""

    LIMITS: ClassVar[dict[str, float]] = LIMITS


class _PlanConversions(StrictModel, ParallelDims):
    """A Plan's conversions to and from a :class:`Choice` (the fields they share: ``SHARED_WITH_CHOICE``)."""

    def to_choice(self) -> Choice:
        """The plan's choice: every field a Choice has, and the chunk trims its ``pipeline_layout`` carries."""
        first, last = chunk_trims_of(self.pipeline_layout)
        return Choice(**{name: getattr(self, name) for name in SHARED_WITH_CHOICE}, first_chunk_trim=first,
                      last_chunk_trim=last)

    @classmethod
    def from_choice(cls, choice: Choice, stage_layers: list[int], recompute_layers: list[int],
                    pipeline_layout: Optional[list[list[int]]] = None, **changes: Any) -> "Plan":
        """The plan of ``choice`` with this stage split; ``changes`` override choice fields (e.g. a canonical
        ``recompute``)."""
        fields = {name: getattr(choice, name) for name in SHARED_WITH_CHOICE}
        return cls(**{**fields, **changes}, stage_layers=stage_layers, recompute_layers=recompute_layers,
                   pipeline_layout=pipeline_layout)


_PLAN_DOC = """The canonical, complete parallel plan (CONTRACT.md output ``plan``): a :class:`Choice` plus its stage
    split (``stage_layers``, ``recompute_layers``, ``pipeline_layout``). Degree products are
    :class:`ParallelDims`'s (``num_gpus``, ``dense_dp``, ``expert_dp``, ...), as on a Choice."""

if TYPE_CHECKING:  # what editors and type checkers read; at run time both are built from the declaration below
    class PlanSpec(_PlanSpecLimits):
        """The YAML form of a plan (``plan:`` in a spec)."""

        # ---- generated from costmodel/spec/plan_fields.py (tests/costmodel/spec/test_plan_fields.py): do not edit
        tp: int = ...
        cp: int = ...
        pp: int = ...
        dp: Optional[int] = ...
        ep: int = ...
        etp: int = ...
        micro_batch_size: int = ...
        num_microbatches: Optional[int] = ...
        vpp: int = ...
        schedule: Schedule = ...
        stage_layers: Optional[list[int]] = ...
        recompute: Recompute = ...
        recompute_layers: Optional[list[int]] = ...
        zero_stage: Literal[0, 1, 2, 3] = ...
        sequence_parallel: bool = ...
        cp_comm_type: CpCommType = ...
        zero_replicas: int = ...
        optimizer_states: Optional[OptimizerStates] = ...
        optimizer_offload_fraction: float = ...
        moe_fp8_dispatch: bool = ...
        moe_a2a_overlap: bool = ...
        activation_offload_layers: int = ...
        stage_pools: Optional[list[int]] = ...
        pipeline_layout: LayoutForms = ...
        # ---- end of generated fields

    class Plan(_PlanConversions):
        """The canonical, complete parallel plan."""

        # ---- generated from costmodel/spec/plan_fields.py (tests/costmodel/spec/test_plan_fields.py): do not edit
        tp: int
        cp: int
        pp: int
        dp: int
        ep: int
        etp: int
        micro_batch_size: int
        num_microbatches: int
        vpp: int
        schedule: Schedule
        stage_layers: list[int]
        recompute: Recompute
        recompute_layers: list[int]
        zero_stage: Literal[0, 1, 2, 3]
        sequence_parallel: bool
        pipeline_layout: DecoderLayout = ...
        cp_comm_type: CpCommType = ...
        zero_replicas: int = ...
        optimizer_states: Optional[OptimizerStates] = ...
        optimizer_offload_fraction: float = ...
        moe_fp8_dispatch: bool = ...
        moe_a2a_overlap: bool = ...
        activation_offload_layers: int = ...
        stage_pools: Optional[list[int]] = ...
        # ---- end of generated fields
else:
    PlanSpec = create_model(
        "PlanSpec", __base__=_PlanSpecLimits, __module__=__name__,
        __doc__="The YAML form of a plan (``plan:`` in a spec). Omitted keys take defaults; see :class:`Plan`.",
        **{f.name: f.spec_definition() for f in spec_fields()})

    Plan = create_model(
        "Plan", __base__=_PlanConversions, __module__=__name__,
        __doc__=_PLAN_DOC,
        **{f.name: f.plan_definition() for f in ON_PLAN})
