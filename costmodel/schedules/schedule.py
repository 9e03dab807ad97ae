"""Pipeline schedules as one type, and the pipeline units each schedule paces.

:class:`Schedule` names the schedules a plan can use, and every plan type carries one (``Choice.schedule``,
``Plan.schedule``, ``PlanSpec.schedule``, ``search.schedules``, the profiles' schedules): code tests it with ``is``
or its properties, never against a string. Its values are the strings of the spec, the proto enum mapping
(``wire/convert.py``) and the export/import code: the spec's fields parse them at validation and dump them again
(costmodel/spec/plan.py ``ScheduleField``), so YAML, JSON and messages read as before. Its :meth:`Schedule.bubble_time` is each schedule's bubble formula (DeepSeek-V3 report,
arXiv 2412.19437, Table 2, as tabulated in seed 000 §4, with F the forward time of a chunk, B the backward time,
W the weight-gradient part of B, F&B an overlapped forward+backward pair):

* 1F1B ``(PP-1)(F+B)``; interleaved 1F1B with v virtual stages divides it by v (seed 001 §4.3,
  ``(p-1)/(m·v+p-1)``);
* ZB1P (ZB-H1) ``(PP-1)(F+B-2W)``;
* DualPipe ``(PP/2-1)(F&B+B-3W)``;
* DualPipeV (deepseek-ai/DualPipe README at 3da1bbe) ``(PP/2-1)(F&B+B-3W)`` with PP = 2p half-size stages on p
  ranks, i.e. ``(p-1)(F&B+B-3W)/2`` with a rank's F, B, W (:mod:`~parplan.costmodel.schedules.dualpipev`).

:class:`PipelineUnits` owns what the rest of the cost model and the solver's tables read from a schedule: a
*unit* is what the schedule paces, a stage (one entry of ``Plan.stage_layers``), or under DualPipe a rank pair
that runs stage u for one direction and stage p-1-u for the other (DeepSeek-V3 §3.2.1), so DualPipe has p/2
units of two stages each; a DualPipeV rank is one unit whose ``stage_layers`` entry holds both its half stages
(:mod:`~parplan.costmodel.schedules.dualpipev`). The model's first stage is on unit 0; its last stage on the last unit, or
on unit 0 under DualPipe (rank 0 runs stages 0 and p-1) and DualPipeV (rank 0's second chunk is stage 2p-1).

The uneven-stage bubble (:func:`stage_bubble_weights`): each formula counts the idle time of ``PP-1`` stage slots
as if every stage were as slow as the slowest. With unequal per-micro-batch stage times t_u the fill and drain
pass through every *other* stage once (Alpa, Zheng et al., OSDI '22, arXiv 2201.12023, §5.1 Eq. 2:
``T = Σ_i t_i + (B-1)·max_j t_j`` for 1F1B-like schedules), so the bubble's PP-1 slot times become the other
units' times: ``β·(Σ_u t_u - t_max)/(PP-1)``, with β the schedule's bubble in units of a stage time. Equal stages
give back ``β·t``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from typing import Optional, Protocol

from parplan.costmodel.schedules import dualpipev

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (pyproject's floor): the same behaviour, a str whose str() is its value
    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)


class Schedule(StrEnum):
    """A pipeline schedule; the value is the spec's string (``plan.schedule``, ``search.schedules``)."""

    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB_H1 = "zb-h1"
    DUALPIPE = "dualpipe"
    DUALPIPEV = "dualpipev"

    def __repr__(self) -> str:
        """The value's repr, ``'zb-h1'``: a message that prints a schedule or a list of them (``{value!r}``,
        ``{list(search.schedules)}``) reads as the spec wrote it."""
        return repr(self.value)

    @property
    def paired(self) -> bool:
        """Runs one micro-batch's forward chunk with another's backward chunk (DualPipe, DualPipeV), so their
        EP all-to-all hides behind the partner chunk's compute (costmodel/schedules/paired_overlap.py)."""
        return self in _PAIRED

    @property
    def one_stage_per_rank(self) -> bool:
        """1F1B and ZB-H1: a rank holds one model chunk, warms up ``pp - stage`` micro-batches and needs at least
        pp micro-batches."""
        return self in _ONE_STAGE

    @property
    def reads_weight_grad(self) -> bool:
        """ZB-H1, DualPipe and DualPipeV: the bubble (:meth:`bubble_time`) reads the weight-gradient time W; 1F1B's
        and interleaved's read F and B alone (costmodel/evaluation/choice.py ``bubble_factor`` keys by it)."""
        return self in _READS_WEIGHT_GRAD

    @property
    def needs_pipeline(self) -> bool:
        """ZB-H1, DualPipe and DualPipeV need pp ≥ 2 (legality.schedule_violations)."""
        return self in _NEEDS_PIPELINE

    def bubble_time(self, pp: int, F: float, B: float, W: float = 0.0, FandB: Optional[float] = None,
                    vpp: int = 1) -> float:
        """The schedule's bubble (module docstring) for ``pp`` ranks with chunk times F, B, W and F&B."""
        if pp <= 1:
            return 0.0
        fb = F + B if FandB is None else FandB
        if self is Schedule.ONE_F_ONE_B:
            return (pp - 1) * (F + B)
        if self is Schedule.INTERLEAVED:
            return (pp - 1) * (F + B) / vpp
        if self is Schedule.ZB_H1:
            return max(0.0, (pp - 1) * (F + B - 2 * W))  # W ≤ B, but F + B - 2W < 0 once W > (F + B)/2
        if self is Schedule.DUALPIPE:
            return max(0.0, (pp / 2 - 1) * (fb + B - 3 * W))
        return dualpipev.bubble_time(pp, F, B, W, fb)


# the sets Schedule's properties test membership of (a frozenset: one hash, ~4x faster than a tuple of members)
_PAIRED = frozenset((Schedule.DUALPIPE, Schedule.DUALPIPEV))
_ONE_STAGE = frozenset((Schedule.ONE_F_ONE_B, Schedule.ZB_H1))
_NEEDS_PIPELINE = frozenset((Schedule.ZB_H1, Schedule.DUALPIPE, Schedule.DUALPIPEV))
_READS_WEIGHT_GRAD = frozenset((Schedule.ZB_H1, Schedule.DUALPIPE, Schedule.DUALPIPEV))

# the default search space; 'dualpipev' (costmodel/schedules/dualpipev.py) is searched only when search.schedules names it
SEARCHED_BY_DEFAULT: tuple[Schedule, ...] = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.ZB_H1,
                                             Schedule.DUALPIPE)


def stage_bubble_weights(beta: float, units: int, uneven: bool = True) -> tuple[float, float]:
    """(w_max, w_sum): the bubble is ``w_max·t_max + w_sum·Σ_u t_u`` over the pipeline's ``units`` unit times.

    ``beta``: the schedule's bubble in units of one stage time (:meth:`Schedule.bubble_time` with F + B = 1).
    With ``uneven`` (Alpa §5.1 Eq. 2, the module docstring) the PP-1 idle slots are the other units' times,
    ``β·(Σ t_u - t_max)/(units-1)``; without, every slot is the slowest unit's, ``β·t_max``."""
    if units <= 1 or beta == 0.0:
        return 0.0, 0.0
    if not uneven:
        return beta, 0.0
    k = beta / (units - 1)
    return -k, k


class BubbleKnobs(Protocol):
    """The assumptions :meth:`PipelineUnits.bubble_beta` reads, as spec/assumptions.py's ``Assumptions`` holds them:
    a protocol, so that this room (schedules) imports nothing from the spec room above it."""

    backward_to_forward_ratio: float
    zb_weight_grad_fraction: float
    dualpipe_chunk_overlap: float


class _Pipelined(Protocol):
    schedule: Schedule
    pp: int
    vpp: int


@dataclass(frozen=True)
class PipelineUnits:
    """The units a schedule paces on ``pp`` pipeline ranks (module docstring): their count, the stages
    (``stage_layers`` entries) each runs, where the model's ends lie, and the bubble's weights.

    ``PipelineUnits.of(choice)`` or ``PipelineUnits.of(plan)``: both carry ``schedule``, ``pp`` and ``vpp``."""

    schedule: Schedule
    pp: int  # pipeline ranks (Plan.pp, Choice.pp): the length of stage_layers
    vpp: int = 1

    @classmethod
    def of(cls, c: _Pipelined) -> "PipelineUnits":
        return cls(c.schedule, c.pp, c.vpp)

    @property
    def stages_per_unit(self) -> int:
        """``stage_layers`` entries a unit runs: 2 under DualPipe (stages u and p-1-u), else 1."""
        return 2 if self.schedule is Schedule.DUALPIPE else 1

    @property
    def count(self) -> int:
        """Units: p/2 DualPipe rank pairs (rank p-1-u mirrors rank u), else one per ``stage_layers`` entry."""
        return self.pp // 2 if self.schedule is Schedule.DUALPIPE and self.pp > 1 else self.pp

    def partner(self, stage: int) -> int:
        """The other stage of ``stage``'s unit: p-1-stage under DualPipe, else the stage itself."""
        return self.pp - 1 - stage if self.schedule is Schedule.DUALPIPE else stage

    def unit_stages(self, unit: int) -> tuple[int, ...]:
        """The ``stage_layers`` entries unit ``unit`` runs."""
        return (unit, self.partner(unit)) if self.stages_per_unit == 2 else (unit,)

    @property
    def stage_pairs(self) -> tuple[tuple[int, ...], ...]:
        """Every unit's stages, in unit order (DualPipe: ``((0, p-1), (1, p-2), ...)``)."""
        return tuple(self.unit_stages(u) for u in range(self.count))

    @property
    def chunks_per_stage(self) -> int:
        """Model chunks one ``stage_layers`` entry holds, each sending its boundary both ways: a DualPipeV rank's
        two half stages, else vpp (1 unless interleaved)."""
        return 2 if self.schedule is Schedule.DUALPIPEV else self.vpp

    @property
    def least_layers_per_unit(self) -> int:
        """Every chunk of every stage of a unit holds at least one layer."""
        return self.stages_per_unit * self.chunks_per_stage

    @property
    def last_stage(self) -> int:
        """The ``stage_layers`` entry holding the model's last stage (head, loss, MTP): rank 0 under DualPipeV
        (its second chunk is stage 2p-1), else the last."""
        return 0 if self.schedule is Schedule.DUALPIPEV else self.pp - 1

    @property
    def ends_on_unit_zero(self) -> bool:
        """The model's first and last stage both lie on unit 0 (DualPipe's and DualPipeV's rank 0)."""
        return self.schedule.paired

    @property
    def stage_share(self) -> float:
        """The weight of one of a unit's stages in the unit's per-micro-batch time and activations: a DualPipe
        rank runs each of its two stages for half the micro-batches."""
        return 1.0 / self.stages_per_unit

    def bubble_beta(self, a: "BubbleKnobs", weight_grad_share: float = 1.0) -> float:
        """The bubble in units of the slowest unit's per-micro-batch time, F : B = 1 : ratio.

        DualPipe's paired chunk F&B (DeepSeek-V3 §3.2.1, Table 2) runs one micro-batch's forward and another's
        backward together so that each one's all-to-all and p2p hide behind the other's *compute*; the two
        computations still share the SMs, so F&B = F + B - (communication the pairing hides). The stage time
        t = F + B already carries only the exposed communication (the EP term's ``exposed()`` credits what the
        pairing hides), so in units of t, F&B = F + B - x·F with x = ``dualpipe_chunk_overlap`` (default 0: no
        compute hidden by compute; the DualPipe repository, dualpipe/dualpipe.py at 030ce43, hands each pair to
        the model's own ``overlapped_forward_backward`` hook, whose reference example runs the two chunks one
        after the other).

        W, the weight-gradient part of B, exists only for the linear layers' GEMMs (Qi et al. 2023, Zero Bubble
        Pipeline Parallelism, arXiv 2401.10241, §2: B computes the input gradient, W the parameter gradient of each
        linear layer; the attention core, the elementwise work and the communication have none): W =
        ``zb_weight_grad_fraction`` x ``weight_grad_share`` x B, with ``weight_grad_share`` the share of the
        stage time spent in linear GEMMs (ChoiceCosts.weight_grad_share; 1: the whole backward, the smallest
        ZB/DualPipe bubble, which the solver's lower bounds use)."""
        r = a.backward_to_forward_ratio
        F, B = 1 / (1 + r), r / (1 + r)
        W = a.zb_weight_grad_fraction * min(1.0, max(0.0, weight_grad_share)) * B
        FandB = F + B - a.dualpipe_chunk_overlap * F
        return self.schedule.bubble_time(self.pp, F, B, W, FandB, self.vpp)

    def bubble_weights(self, beta: float, uneven: bool) -> tuple[float, float]:
        """(w_max, w_sum) of the bubble over the ``pp`` stage rows: ``w_max·t_max + w_sum·Σ_rows t_row``, a
        DualPipe pair appearing as both its ranks (the evaluator's rows). Over the :attr:`count` units the sum's
        weight is ``w_sum·stages_per_unit`` (:meth:`unit_bubble_weights`)."""
        return stage_bubble_weights(beta, self.pp, uneven)

    def unit_bubble_weights(self, beta: float, uneven: bool) -> tuple[float, float]:
        """(w_max, w_sum) over the :attr:`count` units (the solver's tables): each DualPipe unit stands for its
        two mirrored ranks, so its time counts twice in the sum (an exact ×2 in floating point)."""
        w_max, w_sum = self.bubble_weights(beta, uneven)
        return w_max, w_sum * self.stages_per_unit
