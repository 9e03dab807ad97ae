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
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.schedules.bubble import stage_bubble_weights
from parplan.costmodel.evaluation.choice import ChoiceCosts, LayerCost
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule
from parplan.costmodel.spec.layout import interleaved_inflight_chunks
from parplan.solver.deadline import checked_range
from parplan.solver.paired_split import (first_of, paired_exposure_table, rank_split, recomputing_stages,  # noqa: F401
                                         split_exposure, pair_split_violations)
from parplan.solver.chunk_trims import trimmed_stage_least_layers

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
        every unit (:func:`build_table`), plus the units' constants; recompute and the exposure only add to it."""
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


def _time_units(seconds: np.ndarray, scale: Scale) -> np.ndarray:
    return np.rint(np.asarray(seconds, float) * (NS / scale.time_unit_ns)).astype(np.int64)


def objective_weights(costs: ChoiceCosts, a: Assumptions, scale: Scale) -> tuple[int, int, int]:
    """(M, S, units) of the choice's table: the objective's weights of the slowest unit's time and of the units'
    summed times, and the number of units (module docstring)."""
    c = costs.choice
    pipe = schedule_units(c.schedule, c.pp)
    w_max, w_sum = stage_bubble_weights(costs.bubble_s(1.0, a), c.pp, a.uneven_stage_bubble)
    return (int(round(scale.weight * (c.num_microbatches + w_max))),
            int(round(scale.weight * w_sum * pipe.stages_per_unit)), pipe.count)


def mean_unit_bound(costs: ChoiceCosts, a: Assumptions, num_layers: int, k_dense_model: int, is_moe: bool,
                    scale: Scale) -> tuple[int, int]:
    """(weight, lb_time) of the choice's table without building it: the objective's weight of the mean unit time
    (M + S·units: the slowest unit takes at least the mean, all of them n·the mean) and a lower bound of that
    mean (without recompute, less a margin for the rounding of the per-unit coefficients). The search's first
    bound past the quick one, weight·lb_time, needs only these."""
    c = costs.choice
    p = c.pp
    main: LayerCost = costs.moe if is_moe else costs.dense
    k = k_dense_model if is_moe else 0
    mean_time = (k * costs.dense.time_s + (num_layers - k) * main.time_s + p * costs.p2p_s
                 + costs.first_extra_time_s + costs.last_extra_time_s) / p
    lb_time = max(0, scale.time(mean_time) - 2 * num_layers - 4 * p)
    M, S, units = objective_weights(costs, a, scale)
    return M + S * units, lb_time


def _stage_constants(costs: ChoiceCosts, main: LayerCost, k: int, inflight: np.ndarray, pipe: PipelineUnits,
                     all_layers: bool = False):
    """Per stage (floats): the time, states, activation and DP constants beside the per-layer terms (the
    embedding on stage 0, the head and logits on the last stage, the leading dense layers' difference to the
    main class on stage 0, the trimmed chunks' activations; ``all_layers``: every layer recomputed, so a
    trimmed chunk's missing layers are checkpoints, not whole activations)."""
    c, p, dense = costs.choice, costs.choice.pp, costs.dense
    if costs.stage_io_bytes or costs.retained_output_bytes:
        buffers = np.array([costs.pipeline_buffer_bytes(i) for i in checked_range(p)], float)
    else:
        buffers = np.zeros(p)
    t_0 = np.full(p, costs.p2p_s)
    states_0 = buffers.copy()
    # once per stage (a DualPipe rank: the mean of its two stages'), with the plan's NCCL / TE buffers
    act_0 = np.full(p, costs.workspace_bytes + costs.runtime_bytes)
    dp_0 = np.full(p, costs.dp_const_s)
    t_0[0] += costs.first_extra_time_s
    states_0[0] += costs.first_extra_bytes
    dp_0[0] += costs.first_extra_dp_s
    last = pipe.last_stage
    t_0[last] += costs.last_extra_time_s
    states_0[last] += costs.last_extra_bytes + costs.logits_bytes
    dp_0[last] += costs.last_extra_dp_s
    if k:  # l layers on stage 0 = k dense + (l - k) main
        t_0[0] += k * (dense.time_s - main.time_s)
        states_0[0] += k * (dense.states_bytes - main.states_bytes)
        act_0[0] += k * inflight[0] * (dense.act_bytes - main.act_bytes)
        dp_0[0] += k * (dense.dp_s - main.dp_s)
    if c.first_chunk_trim or c.last_chunk_trim:
        # the evaluator weighs each chunk's layers by the forwards it holds in flight (frameworks/layout.py); a
        # trimmed chunk lacks layers at its own count, not at the stage's mean. Trimmed choices recompute no
        # layer or every layer (space.PrunedValues.recompute_trimmed: no per-chunk 'full' counts), so the missing
        # layers are whole activations or, all recomputed, checkpoints (costmodel/spec/layout.py stage_activation_bytes)
        per_layer = main.act_recomputed_bytes if all_layers else main.act_bytes
        for stage, chunk, trim in ((0, 0, c.first_chunk_trim), (p - 1, c.vpp - 1, c.last_chunk_trim)):
            held = interleaved_inflight_chunks(p, c.vpp, c.num_microbatches, stage)[chunk]
            act_0[stage] -= trim * per_layer * (held - inflight[stage])
    return t_0, states_0, act_0, dp_0


def _layers_min(c, pipe: PipelineUnits, n: int, k: int, g: int) -> np.ndarray:
    """Least layers of each unit: a layer per stage (or chunk), stage 0 holding the ``k`` dense layers."""
    lo = np.zeros(n, np.int64)
    if pipe.schedule.paired:  # two stages per unit, each ≥ 1 layer; stage 0 holds the dense ones
        lo[:] = 2
        lo[0] = max(k, 1) + 1
    else:
        lo[:] = g
        lo[0] = max(g, -(-k // g) * g)
        # trimmed end chunks (chunk_trims.chunk_trims, k = 0): unit 0 holds g·q − a layers, q ≥ max(1, a), the last
        # unit g·q − b; their layer counts keep that residue modulo the grid
        for u, trim in ((0, c.first_chunk_trim), (n - 1, c.last_chunk_trim)):
            if trim:
                lo[u] = trimmed_stage_least_layers(g, trim)
    return lo


def build_table(costs: ChoiceCosts, a: Assumptions, num_layers: int, k_dense_model: int, is_moe: bool,
                split: StageSplit, uniform_recompute: bool, scale: Scale, recompute_all: bool = False,
                exposure: bool = True) -> StageTable:
    """The integer table of one choice (``k_dense_model``: the model's leading dense layers if MoE); without
    ``exposure``, the table less its paired exposure (:func:`with_exposure` adds it): what the search's first
    relaxation reads, the exposure costing most of a DualPipe table's time.

    Per stage s (floats first): time ``t_l·l + t_0[s]``, memory ``(states_l + inflight[s]·act_l)·l + states_0[s]
    + inflight[s]·act_0[s]``, saving ``inflight[s]·(act_l - act_recomputed_l)`` per recomputed layer; stage 0
    holds the embedding and the model's leading dense layers (their difference to the main class folded into
    its constants), the last stage the head and logits. Then stages are paired into DualPipe ranks."""
    c = costs.choice
    p = c.pp
    main: LayerCost = costs.moe if is_moe else costs.dense
    k = k_dense_model if is_moe else 0
    dense = costs.dense
    inflight = np.array([costs.inflight(i) for i in checked_range(p)], float)
    pipe = schedule_units(c.schedule, p)
    all_layers = recompute_all and c.recompute == "full"
    t_0, states_0, act_0, dp_0 = _stage_constants(costs, main, k, inflight, pipe, all_layers)
    t_rd = save_rd = 0.0
    if k:
        t_rd, save_rd = dense.recompute_s, inflight[0] * (dense.act_bytes - dense.act_recomputed_bytes)
    dualpipe = (pipe.stages_per_unit == 2)
    if dualpipe:
        # rank u runs stages u and p-1-u: time and activations weighted 1/2, states and DP time summed
        first, second = np.arange(p // 2), p - 1 - np.arange(p // 2)
        w = 0.5
        ranks_t0 = w * (t_0[first] + t_0[second])
        ranks_m0 = states_0[first] + states_0[second] + w * (act_0[first] + act_0[second])
        ranks_dp0 = dp_0[first] + dp_0[second]
        inflight_u = inflight[first]
    else:
        w = 1.0
        ranks_t0, ranks_m0, ranks_dp0, inflight_u = t_0, states_0 + act_0, dp_0, inflight
    n = len(inflight_u)
    t_layer = np.full(n, int(round(w * main.time_s * NS / scale.time_unit_ns)), np.int64)
    t_rc = np.full(n, int(round(w * main.recompute_s * NS / scale.time_unit_ns)), np.int64)
    m_layer = kib_up(main.states_bytes + w * inflight_u * main.act_bytes)
    m_saved = kib_down(w * inflight_u * (main.act_bytes - main.act_recomputed_bytes))
    dp_layer = np.full(n, int(round(main.dp_s * NS / scale.time_unit_ns)), np.int64)
    g = max(1, c.vpp)
    lo = _layers_min(c, pipe, n, k, g)
    fixed = None
    if split == "even":
        fixed = np.full(n, (num_layers // p) * pipe.stages_per_unit, np.int64)
    free = UNLIMITED
    if dualpipe and k and split == "even":
        free = num_layers // p  # stage p-1's layers: beyond them MoE recompute falls on stage 0, dense first
    T = scale.time
    _, lb_time = mean_unit_bound(costs, a, num_layers, k_dense_model, is_moe, scale)
    M, S, _ = objective_weights(costs, a, scale)
    t_rd_u = T(w * t_rd) if k else 0
    s_d_u = kib_down(w * save_rd) if k else 0
    ws_u = kib_up(w * costs.recompute_workspace_bytes)
    t_const_u, m_const_u = _time_units(ranks_t0, scale), kib_up(ranks_m0)
    if all_layers:  # every layer recomputed: per-layer costs absorb it, every stage holds the working set
        t_layer, m_layer = t_layer + t_rc, m_layer - m_saved
        t_const_u = t_const_u.copy()
        m_const_u = m_const_u + ws_u * pipe.stages_per_unit
        if k:
            t_const_u[0] += k * (t_rd_u - int(t_rc[0]))
            m_const_u[0] += k * (int(m_saved[0]) - s_d_u)
        t_rc, m_saved = np.zeros(n, np.int64), np.zeros(n, np.int64)
        t_rd_u = s_d_u = ws_u = 0
    table = StageTable(
        choice=c, num_layers=num_layers, split=split, uniform_recompute=uniform_recompute and not all_layers,
        dualpipe=dualpipe,
        grid=1 if dualpipe else g, k_dense=k, layers_min=lo, layers_fixed=fixed, t_layer=t_layer,
        t_recompute=t_rc, t_const=t_const_u, m_layer=m_layer, m_saved=m_saved,
        m_const=m_const_u, dp_layer=dp_layer, dp_const=_time_units(ranks_dp0, scale),
        t_recompute_dense=t_rd_u, m_saved_dense=s_d_u,
        dense_first=not dualpipe, free_moe_recompute=free, recompute_all=all_layers, m_workspace=ws_u,
        M=M, scale=scale, lb_time=lb_time, S=S)
    return with_exposure(table, costs) if exposure else table


def with_exposure(t: StageTable, costs: ChoiceCosts) -> StageTable:
    """Table ``t`` (built without its exposure, :func:`build_table`) with each unit's paired exposure
    (:func:`paired_exposure_table`); ``t`` itself where the choice leaves none (no paired schedule, a dense model, no
    all-to-all)."""
    c = t.choice
    t_pair, pair_first, t_split = paired_exposure_table(
        costs, schedule_units(c.schedule, c.pp), t.num_layers, t.k_dense, t.layers_fixed is not None,
        t.scale.time_unit_ns, every_split=c.recompute == "full" and not t.recompute_all)
    if t_pair is None:
        return t
    return replace(t, t_pair=t_pair, pair_first=pair_first, t_split=t_split)


@dataclass(frozen=True)
class Assignment:
    """Per-unit layer counts and recompute counts (``dense``: unit 0's recomputed dense layers)."""

    layers: tuple[int, ...]
    recompute: tuple[int, ...]  # MoE (or dense-model) layers recomputed per unit
    dense: int = 0
    first: tuple[int, ...] | None = None  # DualPipe: each rank's phase-0 stage layers (None: least exposure)


def unit_values(t: StageTable, x: Assignment) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, memory KiB, dp time) per unit of an assignment."""
    l = np.array(x.layers, np.int64)
    r = np.array(x.recompute, np.int64)
    time = t.t_layer * l + t.t_recompute * r + t.t_const
    if x.first is None:
        time += t.pair_time(l)
    else:
        time += np.array([split_exposure(t, u, x.layers[u], x.first[u]) for u in range(t.num_units)], np.int64)
    mem = t.m_layer * l - t.m_saved * r + t.m_const + t.m_workspace * recomputing_stages(t, x)
    dp = t.dp_layer * l + t.dp_const
    time[0] += t.t_recompute_dense * x.dense
    mem[0] -= t.m_saved_dense * x.dense
    return time, mem, dp


def evaluate_assignment(t: StageTable, x: Assignment) -> tuple[int, int]:
    """(U, peak memory KiB) of an assignment: the objective both searches minimise."""
    time, mem, dp = unit_values(t, x)
    return t.objective(int(time.max()), int(dp.max()), int(time.sum())), int(mem.max())


def assignment_violations(t: StageTable, x: Assignment, cap_kib: int) -> list[str]:
    """Every structural rule of the table an assignment breaks (empty: it is a plan of this choice)."""
    out = []
    n, L, g, k = t.num_units, t.num_layers, t.grid, t.k_dense
    l, r = list(x.layers), list(x.recompute)
    if len(l) != n or len(r) != n:
        return [f"{n} units expected"]
    if sum(l) != L:
        out.append(f"layers sum to {sum(l)}, not {L}")
    for u in range(n):
        if l[u] < t.layers_min[u] or (l[u] - t.layers_min[u]) % g:
            out.append(f"unit {u}: {l[u]} layers (min {t.layers_min[u]}, in steps of {g})")
        if t.layers_fixed is not None and l[u] != t.layers_fixed[u]:
            out.append(f"unit {u}: even split needs {t.layers_fixed[u]} layers")
        if r[u] < 0 or r[u] + (x.dense if u == 0 else 0) > l[u]:
            out.append(f"unit {u}: recomputes {r[u]} of {l[u]}")
    if x.dense < 0 or x.dense > k or (x.dense and not k):
        out.append(f"dense recompute {x.dense} of {k}")
    if k and x.dense < k and r[0] > (0 if t.dense_first else t.free_moe_recompute):
        out.append("stage 0 recomputes MoE layers before all its dense layers")
    if k and r[0] > l[0] - k:
        out.append("unit 0 recomputes more MoE layers than it holds")
    if (t.choice.recompute != "full" or t.recompute_all) and (any(r) or x.dense):
        out.append(f"recompute '{t.choice.recompute}' recomputes no whole layers")
    if t.split == "first_last" and n >= 3:
        if len(set(l[1:-1])) > 1 or len(set(r[1:-1])) > 1:
            out.append("first_last: middle units share one layer and one recompute count")
    if t.uniform_recompute:
        per_stage = uniform_recompute_of(t, x)
        if per_stage is None:
            out.append("uniform_recompute: stages recompute different counts")
    out += pair_split_violations(t, x)
    _, mem, _ = unit_values(t, x)
    if int(mem.max()) > cap_kib:
        out.append(f"peak {int(mem.max())} KiB over the cap {cap_kib} KiB")
    return out


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
