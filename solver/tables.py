"""Integer stage tables: the cost model of one choice as per-unit affine costs, in integers both searches read.

A *unit* is what the pipeline schedule paces: a stage, or under DualPipe a rank, which runs stage i for one
direction and stage p-1-i for the other (DeepSeek-V3 §3.2.1; ``costmodel/evaluation/evaluate.py`` pairs them the same
way). Every unit ``u`` has its own layer count ``l_u`` and recompute count ``r_u``, and (from
``costmodel/evaluation/choice.py``, where each term is cited)::

    time_u   = t_layer_u·l_u + t_recompute_u·r_u + t_const_u                (per micro-batch)
    memory_u = m_layer_u·l_u - m_saved_u·r_u + m_const_u                    (peak, with its in-flight count)
    dp_u     = dp_layer·l_u + dp_const_u                                    (exposed DP time per step)
    U        = M·max_u time_u + S·Σ_u time_u + W·max_u dp_u                 (the step time, scaled)
    M = round(W·(m + w_max)),   S = round(W·w_sum·members)

with ``(w_max, w_sum)`` the bubble's weights on the slowest and the summed unit times
(``costmodel/schedules/bubble.py: stage_bubble_weights``: ``-β/(p-1)`` and ``β/(p-1)`` with β the schedule's bubble in
stage times; ``β`` and 0 without ``uneven_stage_bubble``), ``members`` the stages per unit (the evaluator sums
a DualPipe rank's time once per stage pair member). On an MoE model the first stage's
``k`` leading dense layers are folded into its constants, and its recompute has a dense piece (``r_dense ≤ k``,
recomputed first, as the evaluator counts a stage's recomputed layers from its first layer) and an MoE piece.
A DualPipe rank's time is the mean of its two stages' (each runs half the micro-batches) and its memory holds
both stages' states and the mean of their activations, so a rank depends only on its layer and recompute
*totals*; the rank of stages 0 and p-1 keeps the dense layers on stage 0. A DualPipeV rank (two half stages,
every micro-batch through both; ``costmodel/schedules/dualpipev.py``) is a unit like a plain stage whose ``stage_layers``
entry is the rank's total, with both the embedding and the head on unit 0 and at least two layers per unit.

Units and scaling (:class:`Scale`): one time unit is ``2^j`` ns and the objective weight ``W`` a power of two,
chosen per problem so the optimum's stage time is about 2^28 units and ``M`` at most 2^20: every quantity the
searches form stays far below 2^62 (checked before CP-SAT solves, :func:`parplan.solver.cpsat.check_headroom`)
while the time resolution stays below 1e-8 of a stage time. Memory is in KiB, costs rounded up and savings
down: never under-estimated.

This module holds the table (:class:`StageTable`), its units (:class:`Scale`), the objective and an assignment of
layers and recompute to the units (:class:`Assignment`); one choice's table is built from its costs in
:mod:`parplan.solver.table_builder`, an assignment is read against its table in :mod:`parplan.solver.assignment_check`,
and a DualPipe rank's split between its two stages is :mod:`parplan.solver.paired_split`'s.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from parplan.costmodel.evaluation.choice import bubble_factor, inflight_microbatches
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule

KIB = 1024.0
NS = 1e9
StageSplit = Literal["per_stage", "first_last", "even"]
STAGE_SPLITS: tuple[StageSplit, ...] = ("per_stage", "first_last", "even")
UNLIMITED = 1 << 40  # a count limit that never binds
TIME_BITS = 28  # target magnitude of the optimum's stage time, in time units
WEIGHT_BITS = 20  # M = round(W·(m + β)) ≤ 2^WEIGHT_BITS where possible
HEADROOM = 1 << 62  # every integer the searches form stays below this (int64, and CP-SAT's own limit)
MIB_KIB = 1024  # KiB per MiB: peaks are compared in whole MiB when ties are broken


@dataclass(frozen=True)
class Scale:
    """The integer units of one problem: every choice of it shares them, so objectives compare exactly."""

    time_unit_ns: int  # a power of two
    weight: int  # W, a power of two

    @staticmethod
    def for_problem(stage_time_ns: float, max_factor: float) -> "Scale":
        """``stage_time_ns``: a typical optimal stage time (a lower bound suffices); ``max_factor``: the
        largest m + β of any choice."""
        j = max(0, int(math.floor(math.log2(max(stage_time_ns, 1.0)))) - TIME_BITS)
        w = max(0, WEIGHT_BITS - int(math.ceil(math.log2(max(max_factor, 1.0)))))
        return Scale(time_unit_ns=1 << j, weight=1 << w)

    @staticmethod
    def microbatch_factors(choices: list, a) -> np.ndarray:
        """m + bubble_factor of each choice (the largest is :meth:`for_problem`'s ``max_factor``; the quick bound's
        factor, Problem.quick_factor); bubble_factor asked once per (schedule, pp, vpp), all it reads."""
        betas: dict[tuple, float] = {}
        out = []
        for key, c in zip(map(operator.attrgetter("schedule", "pp", "vpp"), choices), choices):
            beta = betas.get(key)
            if beta is None:
                beta = betas[key] = bubble_factor(c, a)
            out.append(c.num_microbatches + beta)
        return np.array(out)

    def time(self, seconds: float) -> int:
        return int(round(seconds * NS / self.time_unit_ns))

    def seconds(self, objective: int) -> float:
        """An objective value U back in seconds."""
        return objective / self.weight * self.time_unit_ns / NS

    def objective_of_seconds(self, seconds: float) -> float:
        return seconds * NS / self.time_unit_ns * self.weight


def kib_up(nbytes):
    """Bytes to KiB rounded up (a cost: never under-estimated); a number or an array."""
    out = np.ceil(np.asarray(nbytes, float) / KIB - 1e-9).astype(np.int64)
    return int(out) if out.ndim == 0 else out


def kib_down(nbytes):
    """Bytes to KiB rounded down (a saving: never over-estimated); a number or an array."""
    out = np.floor(np.asarray(nbytes, float) / KIB + 1e-9).astype(np.int64)
    return int(out) if out.ndim == 0 else out


# stage_inflight's answers by all that costmodel.evaluation.choice.inflight_microbatches reads of a choice; pipelines
# of more stages than INFLIGHT_CACHE_STAGES are computed each time (a long tuple per entry), past INFLIGHT_CACHE_MAX
# entries the cache starts over
_INFLIGHT: dict = {}
INFLIGHT_CACHE_MAX = 1 << 14
INFLIGHT_CACHE_STAGES = 256


def stage_inflight(c) -> tuple[float, ...]:
    """``inflight_microbatches(c, s)`` of every stage ``s`` of choice ``c`` (costmodel/evaluation/choice.py), kept by
    all that function reads of the choice: its schedule, pp, vpp, micro-batch count and all-to-all overlap (the
    search asks it of every choice it bounds, request after request: solver/shared_bounds.py ``table_key``)."""
    key = (c.schedule, c.pp, c.vpp, c.num_microbatches, c.moe_a2a_overlap)
    hit = _INFLIGHT.get(key)
    if hit is None:
        hit = tuple(inflight_microbatches(c, s) for s in range(c.pp))
        if c.pp <= INFLIGHT_CACHE_STAGES:
            if len(_INFLIGHT) >= INFLIGHT_CACHE_MAX:
                _INFLIGHT.clear()
            _INFLIGHT[key] = hit
    return hit


@functools.lru_cache(maxsize=None)
def schedule_units(schedule: Schedule, pp: int) -> PipelineUnits:
    """The pipeline units the tables pace (costmodel/schedules/schedule.py ``PipelineUnits``: DeepSeek-V3 §3.2.1 for
    DualPipe's rank pairs, ``costmodel/schedules/dualpipev.py`` for DualPipeV's); solver/ restates none of it. Kept per
    (schedule, pp): a frozen record the search asks for every choice it bounds."""
    return PipelineUnits(schedule, pp)


@dataclass(frozen=True)
class StageTable:
    """One choice's integer model: per-unit coefficient arrays (int64, one entry per unit)."""

    choice: object  # costmodel.evaluation.choice.Choice
    num_layers: int
    split: StageSplit
    uniform_recompute: bool
    dualpipe: bool
    grid: int  # every stage's layer count is a multiple of this (vpp)
    k_dense: int  # leading dense layers, on stage 0 (MoE models)
    layers_min: np.ndarray  # least layers of each unit
    layers_fixed: np.ndarray | None  # 'even': the layers of each unit
    t_layer: np.ndarray  # one value on every unit (the main class's layer; unit 0's dense ones are in its constants)
    t_recompute: np.ndarray  # per recomputed (MoE or dense-model) layer
    t_const: np.ndarray
    m_layer: np.ndarray
    m_saved: np.ndarray
    m_const: np.ndarray
    dp_layer: np.ndarray
    dp_const: np.ndarray
    t_recompute_dense: int  # unit 0's dense piece (k_dense > 0)
    m_saved_dense: int
    dense_first: bool  # unit 0 must recompute all k dense layers before any MoE layer (a plain stage 0)
    free_moe_recompute: int  # DualPipe rank 0: MoE layers it may recompute with dense ones left (stage p-1's)
    recompute_all: bool  # every layer of every stage recomputed, folded into the per-layer costs (no count)
    m_workspace: int  # KiB a stage that recomputes ≥ 1 layer holds on top (its regenerated layer; a DualPipe
    #                   rank counts it per stage, at half weight like its other activations)
    M: int
    scale: Scale
    lb_time: int  # a lower bound of max_u time_u (mean unit time without recompute)
    S: int = 0  # the objective's weight of Σ_u time_u (the uneven-stage bubble)
    # DualPipe/DualPipeV on an MoE model with an all-to-all (:func:`paired_exposure_table`): each unit's exposed
    # all-to-all at every layer total 0..L, and the phase-0 stage's layers that give it (DualPipe's split)
    t_pair: np.ndarray | None = None
    pair_first: np.ndarray | None = None
    t_split: np.ndarray | None = None  # DualPipe with whole-layer recompute: every split's exposure [u, l, first]

    @property
    def num_units(self) -> int:
        return len(self.t_layer)

    @property
    def one_end(self) -> bool:
        """The model's first and last stage lie on unit 0 (DualPipe's rank 0, DualPipeV's rank 0), so the
        'first_last' split frees unit 0 alone."""
        return schedule_units(self.choice.schedule, self.choice.pp).ends_on_unit_zero

    @property
    def members(self) -> int:
        """Stages per unit: 2 under DualPipe, else 1."""
        return 2 if self.dualpipe else 1

    @property
    def recompute_step(self) -> int:
        """Under ``uniform_recompute``, the per-stage count is a multiple of this: Megatron's
        ``--recompute-num-layers`` N recomputes N layers of each of a stage's ``vpp`` chunks (block method), so a
        stage of vpp chunks recomputes vpp·N (frameworks.profiles 'megatron.recompute')."""
        return max(1, self.grid) if self.uniform_recompute and not self.dualpipe else 1

    def objective(self, t_max: int, dp_max: int, t_sum: int = 0) -> int:
        """U of an assignment whose slowest unit takes ``t_max``, whose units take ``t_sum`` together and whose
        largest DP time is ``dp_max``."""
        return scaled_objective(self, int(t_max), int(t_sum), int(dp_max))

    @property
    def base_time_sum(self) -> int:
        """Σ_u time_u without recompute and paired exposure: every layer at the per-layer time, one value on
        every unit (:func:`~parplan.solver.table_builder.build_table`), plus the units' constants; recompute and the exposure only add to it."""
        return int(self.t_layer[0]) * self.num_layers + int(self.t_const.sum())

    def pair_time(self, layers: np.ndarray) -> np.ndarray:
        """The units' paired exposure at ``layers`` (shape (n,) or (n, Q), one row per unit; 0 without it)."""
        layers = np.asarray(layers, np.int64)
        if self.t_pair is None:
            return np.zeros(layers.shape, np.int64)
        rows = np.arange(self.num_units).reshape((-1,) + (1,) * (layers.ndim - 1))
        return self.t_pair[rows, np.clip(layers, 0, self.num_layers)]


def scaled_objective(t: StageTable, t_max, t_sum, dp_max):
    """The one objective both searches minimise (module docstring), in scaled integer units, never seconds:
    ``U = M·t_max + S·Σ_u time_u + W·dp_max``. Its terms may be ints, int64 arrays (the oracle's vectorised
    candidates) or CP-SAT linear expressions (:func:`parplan.solver.cpsat.build_model`)."""
    return t.M * t_max + t.S * t_sum + t.scale.weight * dp_max


@dataclass(frozen=True)
class Assignment:
    """Per-unit layer counts and recompute counts (``dense``: unit 0's recomputed dense layers)."""

    layers: tuple[int, ...]
    recompute: tuple[int, ...]  # MoE (or dense-model) layers recomputed per unit
    dense: int = 0
    first: tuple[int, ...] | None = None  # DualPipe: each rank's phase-0 stage layers (None: least exposure)


def uniform_parts(t: StageTable, r_stage: int) -> tuple[int, np.ndarray]:
    """(unit 0's dense part, every unit's MoE part) when every stage recomputes ``r_stage`` layers."""
    d = min(r_stage, t.k_dense)
    moe = np.full(t.num_units, r_stage * t.members, np.int64)
    moe[0] -= d
    return d, moe


def uniform_layers_min(t: StageTable, r_stage: int) -> np.ndarray:
    """Least layers of each unit when every stage recomputes ``r_stage`` layers (a stage holds what it recomputes)."""
    g = t.grid
    lo = np.maximum(t.layers_min, -(-r_stage // g) * g * t.members)
    if t.dualpipe:
        lo[0] = max(int(t.layers_min[0]), max(t.k_dense, r_stage, 1) + max(r_stage, 1))
    return lo


def uniform_recompute_of(t: StageTable, x: Assignment) -> int | None:
    """The per-stage recompute count of a uniform assignment (None if it is not uniform)."""
    total0 = x.recompute[0] + x.dense
    if total0 % t.members:
        return None
    r_stage = total0 // t.members
    if r_stage % t.recompute_step:
        return None
    d, moe = uniform_parts(t, r_stage)
    return r_stage if x.dense == d and tuple(int(v) for v in moe) == tuple(x.recompute) else None
