"""One choice's integer stage table built from its costs (:class:`~parplan.costmodel.evaluation.choice.ChoiceCosts`):
each stage's constants beside its per-layer terms (the embedding, the head and logits, the leading dense layers,
trimmed chunks), the stages paired into DualPipe ranks, the per-layer coefficients in the problem's integer units,
the objective's weights and the paired exposure (:mod:`parplan.solver.paired_split`). The model the table encodes,
its units and rounding: :mod:`parplan.solver.tables`; each cost term is cited in ``costmodel/evaluation/choice.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from parplan.costmodel.evaluation.choice import ChoiceCosts, LayerCost
from parplan.costmodel.schedules.bubble import stage_bubble_weights
from parplan.costmodel.schedules.schedule import PipelineUnits
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.spec.layout import interleaved_inflight_chunks
from parplan.solver.chunk_trims import trimmed_stage_least_layers, uniform_stage_layers
from parplan.solver.deadline import checked_range
from parplan.solver.paired_split import paired_exposure_table
from parplan.solver.tables import (INFLIGHT_CACHE_STAGES, NS, UNLIMITED, Scale, StageSplit, StageTable, kib_down,
                                  kib_up, schedule_units, stage_inflight)


def _time_units(seconds: np.ndarray, scale: Scale) -> np.ndarray:
    return np.rint(np.asarray(seconds, float) * (NS / scale.time_unit_ns)).astype(np.int64)


def objective_weights(costs: ChoiceCosts, a: Assumptions, scale: Scale) -> tuple[int, int, int]:
    """(M, S, units) of the choice's table: the objective's weights of the slowest unit's time and of the units'
    summed times, and the number of units (module docstring)."""
    w_max, w_sum, stages_per_unit, units = bubble_weights(costs, a)
    return (microbatch_weight(costs.choice.num_microbatches, w_max, scale),
            sum_weight(w_sum, stages_per_unit, scale), units)


def bubble_weights(costs: ChoiceCosts, a: Assumptions) -> tuple[float, float, int, int]:
    """(w_max, w_sum, stages per unit, units): the bubble's weights on the slowest and the summed unit times
    (stage_bubble_weights) and the schedule's units; all :func:`objective_weights` reads of the choice but its
    micro-batch count (the schedule, pp, vpp and the costs' weight-gradient share)."""
    c = costs.choice
    pipe = schedule_units(c.schedule, c.pp)
    w_max, w_sum = stage_bubble_weights(costs.bubble_s(1.0, a), c.pp, a.uneven_stage_bubble)
    return w_max, w_sum, pipe.stages_per_unit, pipe.count


def microbatch_weight(num_microbatches: int, w_max: float, scale: Scale) -> int:
    """M = round(W·(m + w_max)): the objective's weight of the slowest unit's time (module docstring)."""
    return int(round(scale.weight * (num_microbatches + w_max)))


def sum_weight(w_sum: float, stages_per_unit: int, scale: Scale) -> int:
    """S = round(W·w_sum·members): the objective's weight of the units' summed time (module docstring)."""
    return int(round(scale.weight * w_sum * stages_per_unit))


class MeanParts(NamedTuple):
    """What :func:`mean_unit_bound` reads of a choice's costs, in seconds and bubble weights: neither the
    micro-batch count nor the problem's scale, which :meth:`at` applies (solver/shared_bounds.py keeps these)."""

    mean_time_s: float  # the mean unit's time without recompute, per micro-batch
    pp: int
    w_max: float
    w_sum: float
    stages_per_unit: int
    units: int

    def at(self, num_microbatches: int, scale: Scale, num_layers: int) -> tuple[int, int]:
        """(M + S·units, lb_time) at ``num_microbatches`` in ``scale``'s units (:func:`mean_unit_bound`)."""
        summed, lb_time = self.scaled(scale, num_layers)
        return microbatch_weight(num_microbatches, self.w_max, scale) + summed, lb_time

    def scaled(self, scale: Scale, num_layers: int) -> tuple[int, int]:
        """(S·units, lb_time) in ``scale``'s units: all :meth:`at` forms but the micro-batch weight M."""
        lb_time = max(0, scale.time(self.mean_time_s) - 2 * num_layers - 4 * self.pp)
        return sum_weight(self.w_sum, self.stages_per_unit, scale) * self.units, lb_time


def mean_bound_at(parts: MeanParts, num_microbatches: int, scale: Scale, num_layers: int, kept: dict) -> float:
    """weight·lb_time of :meth:`MeanParts.at` (the search's mean-unit bound), its scaled part (:meth:`MeanParts.scaled`)
    kept in ``kept`` by the parts' identity (one problem's dict, one scale: the choices of one parts but another m, e.g.
    another schedule or trims of one base, and every later read of a choice, form only M): the same integers."""
    hit = kept.get(id(parts))
    if hit is None or hit[0] is not parts:  # (the parts held beside: an id is never another's while kept)
        hit = kept[id(parts)] = (parts, *parts.scaled(scale, num_layers))
    return float(microbatch_weight(num_microbatches, parts.w_max, scale) + hit[1]) * hit[2]


def mean_bound_parts(costs: ChoiceCosts, a: Assumptions, num_layers: int, k_dense_model: int,
                     is_moe: bool) -> MeanParts:
    """The :class:`MeanParts` of a choice's costs: its mean unit time and bubble weights."""
    c = costs.choice
    p = c.pp
    main: LayerCost = costs.moe if is_moe else costs.dense
    k = k_dense_model if is_moe else 0
    mean_time = (k * costs.dense.time_s + (num_layers - k) * main.time_s + p * costs.p2p_s
                 + costs.first_extra_time_s + costs.last_extra_time_s) / p
    return MeanParts(mean_time, p, *bubble_weights(costs, a))


def mean_unit_bound(costs: ChoiceCosts, a: Assumptions, num_layers: int, k_dense_model: int, is_moe: bool,
                    scale: Scale) -> tuple[int, int]:
    """(weight, lb_time) of the choice's table without building it: the objective's weight of the mean unit time
    (M + S·units: the slowest unit takes at least the mean, all of them n·the mean) and a lower bound of that
    mean (without recompute, less a margin for the rounding of the per-unit coefficients). The search's first
    bound past the quick one, weight·lb_time, needs only these."""
    parts = mean_bound_parts(costs, a, num_layers, k_dense_model, is_moe)
    return parts.at(costs.choice.num_microbatches, scale, num_layers)


def _stage_constants(costs: ChoiceCosts, main: LayerCost, k: int, inflight: np.ndarray, pipe: PipelineUnits,
                     all_layers: bool = False, fixed_first_layers: int = 0):
    """Per stage (floats): the time, states, activation and DP constants beside the per-layer terms (the
    embedding on stage 0, the head and logits on the last stage, the leading dense layers' difference to the
    main class on stage 0, the trimmed chunks' activations; ``all_layers``: every layer recomputed, so a
    trimmed chunk's missing layers are checkpoints, not whole activations; ``fixed_first_layers``: stage 0's layers
    where the uniform layout fixes them, a trimmed first chunk beside the dense layers)."""
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
        per_dense = dense.act_recomputed_bytes if all_layers else dense.act_bytes
        for stage, chunk, trim in ((0, 0, c.first_chunk_trim), (p - 1, c.vpp - 1, c.last_chunk_trim)):
            held = interleaved_inflight_chunks(p, c.vpp, c.num_microbatches, stage)[chunk]
            act_0[stage] -= trim * per_layer * (held - inflight[stage])
            if k and stage == 0 and trim:
                # the evaluator's per-layer bytes are the stage's mean (ledger.stage_report), which the dense layers
                # move by k·(dense - main)/l: exact for the uniform layout's fixed count l (chunk_trims.uniform_trims)
                act_0[0] -= trim * (held - inflight[0]) * k * (per_dense - per_layer) / fixed_first_layers
    return t_0, states_0, act_0, dp_0


def _layers_min(c, pipe: PipelineUnits, n: int, k: int, g: int) -> np.ndarray:
    """Least layers of each unit: a layer per stage (or chunk), stage 0 holding the ``k`` dense layers: interleaved,
    in its first chunk (the evaluator places them in model-chunk order, ledger.layer_classes), so g·k."""
    lo = np.zeros(n, np.int64)
    if pipe.schedule.paired:  # two stages per unit, each ≥ 1 layer; stage 0 holds the dense ones
        lo[:] = 2
        lo[0] = max(k, 1) + 1
    else:
        lo[:] = g
        lo[0] = g * max(1, k)
        # trimmed end chunks (chunk_trims): unit 0 holds g·q − a layers, q ≥ max(1, a) (with k dense layers in its
        # first chunk, q − a ≥ k), the last unit g·q − b; their layer counts keep that residue modulo the grid
        for u, trim in ((0, c.first_chunk_trim), (n - 1, c.last_chunk_trim)):
            if trim:
                lo[u] = g * (k + trim) - trim if u == 0 and k else trimmed_stage_least_layers(g, trim)
    return lo


class TableFloats(NamedTuple):
    """What :func:`build_table` reads of a choice's costs before the problem's scale and the weight M: the stage
    constants paired into units (floats; memory already in KiB, which no scale reads), the per-layer memory terms and
    the unit structure. Kept by solver/problem.py under the table's shared_bounds.table_key and rule, so a request at
    another scale (or micro-batch count) converts them alone (:func:`table_in_units`)."""

    split: StageSplit
    dualpipe: bool
    fixed: np.ndarray | None
    w: float
    t_0: np.ndarray  # per unit, seconds
    dp_0: np.ndarray  # per unit, seconds
    m_const: np.ndarray  # per unit, KiB (rounded up)
    m_layer: np.ndarray  # KiB up
    m_saved: np.ndarray  # KiB down
    m_saved_dense: int  # KiB down
    m_workspace: int  # KiB up
    layers_min: np.ndarray
    grid: int
    k_dense: int
    free: int
    all_layers: bool
    stages_per_unit: int
    times_s: tuple[float, float, float, float]  # the main layer's time, recompute and DP time; a dense recompute


def table_floats(costs: ChoiceCosts, num_layers: int, k_dense_model: int, is_moe: bool, split: StageSplit,
                 recompute_all: bool = False) -> TableFloats:
    """The :class:`TableFloats` of one choice's costs (:func:`build_table`'s first half)."""
    c = costs.choice
    p = c.pp
    main: LayerCost = costs.moe if is_moe else costs.dense
    k = k_dense_model if is_moe else 0
    inflight = np.array(stage_inflight(c) if p <= INFLIGHT_CACHE_STAGES else  # (long pipelines: the deadline checked)
                        [costs.inflight(i) for i in checked_range(p)], float)
    pipe = schedule_units(c.schedule, p)
    all_layers = recompute_all and c.recompute == "full"
    dualpipe = (pipe.stages_per_unit == 2)
    fixed = None
    if k and (c.first_chunk_trim or c.last_chunk_trim):  # the uniform layout (chunk_trims.uniform_trims): fixed counts
        fixed = np.array(uniform_stage_layers(num_layers, p, c.vpp, c.first_chunk_trim, c.last_chunk_trim), np.int64)
        split = "even"
    elif split == "even":
        fixed = np.full(pipe.count, (num_layers // p) * pipe.stages_per_unit, np.int64)
    w, ranks_t0, ranks_m0, ranks_dp0, inflight_u = _stages_into_units(
        *_stage_constants(costs, main, k, inflight, pipe, all_layers, 0 if fixed is None else int(fixed[0])),
        inflight, dualpipe)
    g = max(1, c.vpp)
    free = UNLIMITED
    if dualpipe and k and split == "even":
        free = num_layers // p  # stage p-1's layers: beyond them MoE recompute falls on stage 0, dense first
    m_layer = kib_up(main.states_bytes + w * inflight_u * main.act_bytes)
    m_saved = kib_down(w * inflight_u * (main.act_bytes - main.act_recomputed_bytes))
    dense = costs.dense
    s_d_u = kib_down(w * (inflight[0] * (dense.act_bytes - dense.act_recomputed_bytes))) if k else 0
    return TableFloats(split, dualpipe, fixed, w, ranks_t0, ranks_dp0, kib_up(ranks_m0), m_layer, m_saved, s_d_u,
                       kib_up(w * costs.recompute_workspace_bytes), _layers_min(c, pipe, len(inflight_u), k, g), g, k,
                       free, all_layers, pipe.stages_per_unit,
                       (main.time_s, main.recompute_s, main.dp_s, dense.recompute_s))


def build_table(costs: ChoiceCosts, a: Assumptions, num_layers: int, k_dense_model: int, is_moe: bool,
                split: StageSplit, uniform_recompute: bool, scale: Scale, recompute_all: bool = False,
                exposure: bool = True, parts: MeanParts | None = None, floats: TableFloats | None = None) -> StageTable:
    """The integer table of one choice (``k_dense_model``: the model's leading dense layers if MoE); without
    ``exposure``, the table less its paired exposure (:func:`with_exposure` adds it): what the search's first
    relaxation reads, the exposure costing most of a DualPipe table's time. ``parts``: the costs'
    :func:`mean_bound_parts` where the caller holds them (solver/problem.py keeps them per choice), else computed:
    the table's lb_time, M and S are read off them (the same arithmetic as :func:`mean_unit_bound` and
    :func:`objective_weights`); ``floats``: the costs' :func:`table_floats` under this split and rule where the caller
    holds them, else computed.

    Per stage s (floats first): time ``t_l·l + t_0[s]``, memory ``(states_l + inflight[s]·act_l)·l + states_0[s]
    + inflight[s]·act_0[s]``, saving ``inflight[s]·(act_l - act_recomputed_l)`` per recomputed layer; stage 0
    holds the embedding and the model's leading dense layers (their difference to the main class folded into
    its constants), the last stage the head and logits. Then stages are paired into DualPipe ranks."""
    if floats is None:
        floats = table_floats(costs, num_layers, k_dense_model, is_moe, split, recompute_all)
    if parts is None:
        parts = mean_bound_parts(costs, a, num_layers, k_dense_model, is_moe)
    table = table_in_units(floats, costs.choice, num_layers, uniform_recompute, scale, parts)
    return with_exposure(table, costs) if exposure else table


def table_in_units(f: TableFloats, c, num_layers: int, uniform_recompute: bool, scale: Scale,
                   parts: MeanParts) -> StageTable:
    """The integer table of choice ``c`` from its :class:`TableFloats` and :class:`MeanParts` in ``scale``'s units
    (:func:`build_table`'s second half, without the paired exposure)."""
    time_s, recompute_s, dp_s, dense_recompute_s = f.times_s
    n = len(f.t_0)
    t_layer = np.full(n, int(round(f.w * time_s * NS / scale.time_unit_ns)), np.int64)
    t_rc = np.full(n, int(round(f.w * recompute_s * NS / scale.time_unit_ns)), np.int64)
    dp_layer = np.full(n, int(round(dp_s * NS / scale.time_unit_ns)), np.int64)
    _, lb_time = parts.at(c.num_microbatches, scale, num_layers)
    table = StageTable(
        choice=c, num_layers=num_layers, split=f.split, uniform_recompute=uniform_recompute,
        dualpipe=f.dualpipe, grid=1 if f.dualpipe else f.grid, k_dense=f.k_dense, layers_min=f.layers_min.copy(),
        layers_fixed=f.fixed, t_layer=t_layer, t_recompute=t_rc, t_const=_time_units(f.t_0, scale),
        m_layer=f.m_layer, m_saved=f.m_saved, m_const=f.m_const, dp_layer=dp_layer,
        dp_const=_time_units(f.dp_0, scale), t_recompute_dense=scale.time(f.w * dense_recompute_s) if f.k_dense else 0,
        m_saved_dense=f.m_saved_dense, dense_first=not f.dualpipe, free_moe_recompute=f.free, recompute_all=False,
        m_workspace=f.m_workspace, M=microbatch_weight(c.num_microbatches, parts.w_max, scale), scale=scale,
        lb_time=lb_time, S=sum_weight(parts.w_sum, parts.stages_per_unit, scale))
    return _every_layer_recomputed(table, f.stages_per_unit) if f.all_layers else table


def _stages_into_units(t_0: np.ndarray, states_0: np.ndarray, act_0: np.ndarray, dp_0: np.ndarray,
                       inflight: np.ndarray, dualpipe: bool):
    """(w, time, memory and DP constants, in-flight micro-batches) per unit from the stages' (floats), ``w`` the
    weight of a stage's time and activations in its unit: a plain stage is its own unit (w = 1); DualPipe's rank u
    runs stages u and p-1-u, their time and activations weighted 1/2 (each runs half the micro-batches), their
    states and DP time summed."""
    if not dualpipe:
        return 1.0, t_0, states_0 + act_0, dp_0, inflight
    p = len(inflight)
    first, second = np.arange(p // 2), p - 1 - np.arange(p // 2)
    w = 0.5
    return (w, w * (t_0[first] + t_0[second]), states_0[first] + states_0[second] + w * (act_0[first] + act_0[second]),
            dp_0[first] + dp_0[second], inflight[first])


def _every_layer_recomputed(t: StageTable, stages_per_unit: int) -> StageTable:
    """Table ``t`` with every layer of every stage recomputed (``recompute_all``): the per-layer costs absorb the
    recompute, every stage holds the working set, unit 0's dense layers their own recompute; no count is left to
    choose."""
    t_const = t.t_const.copy()
    m_const = t.m_const + t.m_workspace * stages_per_unit
    if t.k_dense:
        t_const[0] += t.k_dense * (t.t_recompute_dense - int(t.t_recompute[0]))
        m_const[0] += t.k_dense * (int(t.m_saved[0]) - t.m_saved_dense)
    n = t.num_units
    return replace(t, uniform_recompute=False, recompute_all=True, t_layer=t.t_layer + t.t_recompute,
                   m_layer=t.m_layer - t.m_saved, t_const=t_const, m_const=m_const, t_recompute=np.zeros(n, np.int64),
                   m_saved=np.zeros(n, np.int64), t_recompute_dense=0, m_saved_dense=0, m_workspace=0)


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
