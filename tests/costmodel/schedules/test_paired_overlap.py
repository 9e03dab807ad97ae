"""DualPipe and DualPipeV's paired-chunk exposure (costmodel/schedules/paired_overlap.py) against a discrete-event simulation
of the upstream step orders (tests/dualpipe_sim.py), over random per-chunk compute and all-to-all times with
lopsided splits (a stage with no all-to-all beside one with much, compute split unevenly within a rank)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.dualpipe_sim import OpGraph, op_graph, phase_stages, simulate_dualpipe, simulate_dualpipev, step_orders
from parplan.costmodel.spec.assumptions import Assumptions
from parplan.costmodel.schedules.paired_overlap import (ChunkWork, chunk_pair_exposed_s, component_pair_exposed_s,
                                              component_phases_s, dualpipe_rank_exposed_s, dualpipev_rank_exposed_s,
                                              pair_exposed_s, step_order_counts)
from parplan.costmodel.schedules.schedule import PipelineUnits, Schedule, stage_bubble_weights

FWD_SHARE = 1 / 3  # backward_to_forward_ratio 2


@st.composite
def pipelines(draw):
    """(schedule, per-stage compute C, per-stage all-to-all X, micro-batches m, weight-gradient share w)."""
    schedule = draw(st.sampled_from([Schedule.DUALPIPE, Schedule.DUALPIPEV]))
    ranks = draw(st.sampled_from([2, 4, 6, 8]))
    stages = ranks if schedule is Schedule.DUALPIPE else 2 * ranks
    m = 2 * ranks * draw(st.integers(1, 4))  # legality: DualPipe even m >= 2·pp, DualPipeV m >= 2·pp
    C = [draw(st.floats(0.1, 2.0)) for _ in range(stages)]
    X = [c * draw(st.sampled_from([0.0, 0.3, 0.8, 1.5, 3.0])) for c in C]  # all-to-all : compute, 0 = dense stage
    w = draw(st.sampled_from([0.0, 0.3, 0.5]))
    return schedule, C, X, m, w


def _rows(schedule: Schedule, C: list[float], X: list[float], m: int) -> list[float]:
    """The cost model's per-micro-batch rank rows (costmodel/evaluation/evaluate.py schedule_rows + paired_exposure)."""
    if schedule is Schedule.DUALPIPE:
        p = len(C)
        lo = [min(r, p - 1 - r) for r in range(p)]
        return [(C[r] + C[p - 1 - r]) / 2 + dualpipe_rank_exposed_s(
            p, r, m, ChunkWork(C[lo[r]], X[lo[r]]), ChunkWork(C[p - 1 - lo[r]], X[p - 1 - lo[r]]), FWD_SHARE)
            for r in range(p)]
    P = len(C) // 2
    return [C[r] + C[2 * P - 1 - r] + dualpipev_rank_exposed_s(
        P, r, m, ChunkWork(C[r], X[r]), ChunkWork(C[2 * P - 1 - r], X[2 * P - 1 - r]), FWD_SHARE) for r in range(P)]


def _closed_form_step(schedule: Schedule, C: list[float], X: list[float], m: int, w: float) -> float:
    """``m·t_max + bubble`` as costmodel/evaluation/evaluate.py step_time forms it (no DP term)."""
    rows = _rows(schedule, C, X, m)
    a = Assumptions(backward_to_forward_ratio=(1 - FWD_SHARE) / FWD_SHARE, zb_weight_grad_fraction=w)
    beta = PipelineUnits(schedule, len(rows)).bubble_beta(a)
    w_max, w_sum = stage_bubble_weights(beta, len(rows), a.uneven_stage_bubble)
    return m * max(rows) + w_max * max(rows) + w_sum * sum(rows)


def _simulate(schedule, C, X, m, w):
    return (simulate_dualpipe if schedule is Schedule.DUALPIPE else simulate_dualpipev)(C, X, m, FWD_SHARE, w)


def _fill_busy_drain_step(schedule: Schedule, C: list[float], X: list[float], m: int, w: float) -> float:
    """The longest of one family of paths through the step order, so never longer than the simulated step: for
    each rank r, (1) the first micro-batch's forwards on the h stages before r's phase-0 stage (h = min(r, p-1-r)
    under DualPipe, r under DualPipeV), each its rank's first operation, a lone chunk with its all-to-all
    exposed (f·C + X/2); (2) all of rank r's operations in order (``m·row_r``, its busy time:
    test_rank_busy_time_is_the_step_orders); (3) after r's last backward (its phase 0's last micro-batch), the
    longer of its trailing weight chunks (the deferred share still queued, FIFO as ``WeightGradStore``) and that
    micro-batch's zero-bubble backwards through the same h stages ((1-w)(1-f)·C + X/2 each). The fill and drain
    are priced per stage, not per rank row (a rank's two chunks differ)."""
    f, rows = FWD_SHARE, _rows(schedule, C, X, m)
    best = 0.0
    for r, (row, ops) in enumerate(zip(rows, step_orders(schedule, len(rows), m))):
        stages = phase_stages(schedule, len(rows), r)
        h = stages[0]
        fill = sum(f * C[s] + X[s] / 2 for s in range(h))
        drain = sum((1 - w) * (1 - f) * C[s] + X[s] / 2 for s in range(h))
        queue: list[float] = []
        for op in ops:
            if op.kind == "W":
                queue.pop(0)
            elif op.kind in ("B", "FB"):
                stage = stages[op.phases[-1]]
                if op.zb:
                    queue.append(w * (1 - f) * C[stage])
                tail = sum(queue)  # the weight chunks still queued after this backward run after it
        best = max(best, fill + m * row - tail + max(drain, tail))
    return best


def topological_order(g: OpGraph) -> list[tuple[int, int]]:
    """Every (rank, index) operation after its rank's previous one and its inputs (the order the ranks run)."""
    ptr, done, order = [0] * len(g.orders), set(), []
    moved = True
    while moved:
        moved = False
        for r, ops in enumerate(g.orders):
            while ptr[r] < len(ops) and all(src in done for src in g.inputs[r][ptr[r]]):
                order.append((r, ptr[r]))
                done.add((r, ptr[r]))
                ptr[r] += 1
                moved = True
    assert len(order) == sum(len(ops) for ops in g.orders), "the step order deadlocked"
    return order


def longest_path_s(g: OpGraph) -> float:
    """The longest path through :class:`OpGraph` (operations weighted by their durations)."""
    end: dict = {}
    for r, i in topological_order(g):
        end[(r, i)] = g.durations_s[r][i] + max([end[src] for src in g.inputs[r][i]]
                                                + ([end[(r, i - 1)]] if i else [0.0]))
    return max(end.values())


def _events(g: OpGraph) -> list[set[int]]:
    """Per rank, the indices of the first and of the last operation of each type (kind, phases, zero-bubble)
    within each of the eight steps: where a rank's run of like operations begins and ends."""
    out = []
    for ops in g.orders:
        first: dict = {}
        last: dict = {}
        for i, op in enumerate(ops):
            first.setdefault((op.step, op.kind, op.phases, op.zb), i)
            last[(op.step, op.kind, op.phases, op.zb)] = i
        out.append(set(first.values()) | set(last.values()))
    return out


def _dwell_path_step(schedule: Schedule, C: list[float], X: list[float], m: int, w: float, dwells: int = 6) -> float:
    """The longest of a family of paths through the step order's dependency graph (:func:`dualpipe_sim.op_graph`:
    every operation of every rank with its duration; edges: a rank's consecutive operations, and each operation's
    inputs from the neighbouring stages), so never longer than the simulated step. A path *dwells* on a rank
    where it takes two or more of that rank's consecutive operations, and *passes* a rank where it takes one
    operation between two inputs (a micro-batch's forward or backward chain). The family: at most ``dwells``
    dwells, each move from one dwell to the next leaving or entering a rank at the first or last operation of
    its type in its step (:func:`_events`), so a dwell's ends lie at a few places per step whatever m. Within a
    step a rank repeats one pattern of operations, so a dwell is a whole number of each operation type, each a
    per-stage time (lone f·C + X/2, pairs with pair_exposed_s, (1-w)(1-f)·C + X/2, W): the step is the maximum
    of finitely many linear forms in the ranks' per-chunk operation times, the forms set by (schedule, ranks, m)
    alone. The dwells: the fill (a slow rank's warm-up forwards), a slow rank's steady state, the round trips
    through the neighbouring ranks it waits on, and the drain (python -m tests.costmodel.schedules.test_paired_overlap prints the
    band per ``dwells``)."""
    return _dwell_path_s(op_graph(schedule, C, X, m, FWD_SHARE, w), dwells)


def _dwell_path_s(g: OpGraph, dwells: int) -> float:
    """:func:`_dwell_path_step` over the graph ``g``."""
    events, neg = _events(g), float("-inf")
    # best[(r, i)][k]: the longest family path ending at (r, i) after k dwells, arriving on a pass whose move
    # may enter anywhere (0) or only at a first-of-type operation (1), or inside a dwell (2)
    best: dict = {}
    for r, i in topological_order(g):
        d, row = g.durations_s[r][i], [[neg] * 3 for _ in range(dwells + 1)]
        row[0][0] = d  # a path may start at any operation
        for src in g.inputs[r][i]:
            left_at_event = src[1] in events[src[0]]
            for k, (free, bound, dwell) in enumerate(best[src]):
                row[k][0] = max(row[k][0], free + d, dwell + d if left_at_event else neg)
                row[k][1] = max(row[k][1], bound + d, neg if left_at_event else dwell + d)
        if i:
            entered_at_event = i - 1 in events[r]
            for k, (free, bound, dwell) in enumerate(best[(r, i - 1)]):
                row[k][2] = max(row[k][2], dwell + d)
                if k < dwells:
                    row[k + 1][2] = max(row[k + 1][2], free + d, bound + d if entered_at_event else neg)
        best[(r, i)] = row
    return max(max(map(max, rows)) for rows in best.values())


def _row_scaled_dwell_path_step(schedule: Schedule, C: list[float], X: list[float], m: int, w: float) -> float:
    """:func:`_dwell_path_step` with rank rows only: each operation's duration its compute share (F f, B 1-f or
    (1-w)(1-f) zero-bubble, W w(1-f), an F&B pair 1) times one scale per rank that keeps the rank's busy time
    (m·row); what a form over the solver's rank rows could see of the step order (__main__ prints its band)."""
    g, f = op_graph(schedule, C, X, m, FWD_SHARE, w), FWD_SHARE
    share = {"FB": lambda op: 1.0, "F": lambda op: f, "W": lambda op: w * (1 - f),
             "B": lambda op: (1 - f) * ((1 - w) if op.zb else 1.0)}
    durations = []
    for ops, busy in zip(g.orders, g.durations_s):
        weights = [share[op.kind](op) for op in ops]
        durations.append([x * sum(busy) / sum(weights) for x in weights])
    return _dwell_path_s(OpGraph(g.orders, durations, g.inputs), 6)


def _pair_averaged_dwell_path_step(schedule: Schedule, C: list[float], X: list[float], m: int, w: float) -> float:
    """:func:`_dwell_path_step` with each rank's F&B pairs all at one time, the rank's row less its lone chunks
    (per-stage: f·C + X/2, (1-f)·C + X/2 or (1-w)(1-f)·C + X/2 zero-bubble, W w(1-f)·C) over its pairs:
    ``(m·row - Σ lone) / pairs`` with the cost model's row (:func:`_rows`), so the form needs each rank's row and
    its two stages' compute and all-to-all, not the two pairings' exposure apart (__main__ prints its band)."""
    g = op_graph(schedule, C, X, m, FWD_SHARE, w)
    durations = []
    for ops, busy, row in zip(g.orders, g.durations_s, _rows(schedule, C, X, m)):
        lone = [d for op, d in zip(ops, busy) if op.kind != "FB"]
        pair_s = (m * row - sum(lone)) / (len(ops) - len(lone))
        durations.append([pair_s if op.kind == "FB" else d for op, d in zip(ops, busy)])
    return _dwell_path_s(OpGraph(g.orders, durations, g.inputs), 6)


def test_pair_exposure_by_hand():
    """F of a stage with 3 dense layers (compute 3, no all-to-all) beside B of a stage with 27 MoE layers
    (compute 27·1.2 = 32.4, all-to-all 27·0.8 = 21.6, f = 1/3): the MoE backward's 10.8 of all-to-all beside
    1 of dense forward compute leaves 9.8; the dense forward has nothing to hide. The other pairing: the MoE
    forward's 10.8 beside the dense backward's 2 leaves 8.8, the dense backward nothing."""
    dense, moe = ChunkWork(3.0, 0.0), ChunkWork(32.4, 21.6)
    assert pair_exposed_s(dense, moe, FWD_SHARE) == pytest.approx(10.8 - 1.0)
    assert pair_exposed_s(moe, dense, FWD_SHARE) == pytest.approx(10.8 - 2.0)
    # balanced (15 MoE layers each): forward's 6 beside the other's backward 12 and backward's 6 beside 6: none
    half = ChunkWork(18.0, 12.0)
    assert pair_exposed_s(half, half, FWD_SHARE) == 0.0


def test_component_pair_by_hand():
    """Example numbers (not measured): a layer of attention 12 and MLP 12 (forward + backward, f = 1/3: ATTN(F) 4,
    ATTN(B) 8, MLP(F) 4, MLP(B) 8) and an all-to-all of 8 per pass, dispatch 3 (FP8) and combine 5 (BF16), paired
    with itself. Per component: ATTN(F) 4 beside COMBINE(B) 5 leaves 1; MLP(B) 8 beside DISPATCH(F) 3, MLP(F) 4
    beside DISPATCH(B) 3 and ATTN(B) 8 beside COMBINE(F) 5 leave nothing: the pair takes 24 + 1 = 25. Per chunk the
    forward's 8 of all-to-all hides beside the backward's 16 and the backward's 8 beside the forward's 8: 24, so
    per component the pair is 1/24 = 4.2 % slower."""
    layer = ChunkWork(24.0, 16.0, attn_s=12.0, dispatch_share=3 / 8)
    assert component_phases_s(layer, layer, FWD_SHARE) == [pytest.approx(p) for p in ((4, 5), (8, 3), (4, 3), (8, 5))]
    assert pair_exposed_s(layer, layer, FWD_SHARE) == pytest.approx(1.0)
    assert chunk_pair_exposed_s(layer, layer, FWD_SHARE) == 0.0
    # the dense stage (attention half its compute, no all-to-all) beside the MoE stage of test_pair_exposure_by_hand,
    # dispatch and combine 5.4 each per pass: F(dense) beside B(MoE) leaves COMBINE(B) 5.4 - ATTN(F) 0.5 and
    # DISPATCH(B) 5.4 - MLP(F) 0.5, 9.8 as per chunk; F(MoE) beside B(dense) DISPATCH(F) 5.4 - MLP(B) 1 and
    # COMBINE(F) 5.4 - ATTN(B) 1, 8.8 as per chunk (a stage without all-to-all hides the same either way)
    dense, moe = ChunkWork(3.0, 0.0, attn_s=1.5), ChunkWork(32.4, 21.6, attn_s=16.2)
    assert pair_exposed_s(dense, moe, FWD_SHARE) == pytest.approx(9.8)
    assert pair_exposed_s(moe, dense, FWD_SHARE) == pytest.approx(8.8)


def _two_stream_pair_s(fwd: ChunkWork, bwd: ChunkWork, f: float) -> float:
    """The pair's time by Megatron-Core's issue order (model_chunk_schedule_plan.py:261-301): compute stream
    ATTN(F), MLP(B), MLP(F), ATTN(B); communication stream COMBINE(B), DISPATCH(F), DISPATCH(B), COMBINE(F); each
    operation after its stream's previous one and its own pass's previous operation (the micro-batch's event)."""
    (af, kb), (mb, df), (mf, db), (ab, kf) = component_phases_s(fwd, bwd, f)
    streams = {"comp": [("F", af), ("B", mb), ("F", mf), ("B", ab)], "comm": [("B", kb), ("F", df), ("B", db),
                                                                               ("F", kf)]}
    chains = {"F": [("comp", 0), ("comm", 1), ("comp", 2), ("comm", 3)],
              "B": [("comm", 0), ("comp", 1), ("comm", 2), ("comp", 3)]}
    end: dict = {}
    for i in range(4):  # operation i of each stream waits on the stream's i-1 and its chain's previous operation
        for stream in ("comp", "comm"):
            pas, d = streams[stream][i]
            k = chains[pas].index((stream, i))
            ready = max(end.get((stream, i - 1), 0.0), end[chains[pas][k - 1]] if k else 0.0)
            end[(stream, i)] = ready + d
    return max(end.values())


@st.composite
def chunk_pairs(draw):
    """(forward chunk, backward chunk, f): compute, attention share, all-to-all and dispatch share drawn apart."""
    def chunk():
        c = draw(st.floats(0.0, 10.0))
        return ChunkWork(c, draw(st.floats(0.0, 10.0)), c * draw(st.floats(0.0, 1.0)), draw(st.floats(0.0, 1.0)))
    return chunk(), chunk(), draw(st.floats(0.05, 0.95))


@settings(max_examples=300, deadline=None)
@given(chunk_pairs())
def test_component_exposure_between_per_chunk_and_fully_exposed(case):
    """Per component a pair never hides more than per chunk (each phase pairs forward compute with backward
    communication or the other way round) and never exposes more than the whole all-to-all; the pair's time
    (compute + exposure) is the two-stream order's (:func:`_two_stream_pair_s`)."""
    fwd, bwd, f = case
    comp = component_pair_exposed_s(fwd, bwd, f)
    assert chunk_pair_exposed_s(fwd, bwd, f) <= comp + 1e-9
    assert comp <= (fwd.a2a_s + bwd.a2a_s) / 2 + 1e-9
    pair_s = f * fwd.compute_s + (1 - f) * bwd.compute_s + comp
    assert pair_s == pytest.approx(_two_stream_pair_s(fwd, bwd, f), rel=1e-9, abs=1e-12)


def test_component_exposure_element_wise():
    """Arrays of candidate splits (the solver's tables) price as each split alone; without attention times, per
    chunk."""
    import numpy as np
    C, X, A = np.array([3.0, 18.0, 32.4]), np.array([0.0, 12.0, 21.6]), np.array([1.0, 9.0, 10.0])
    arr = pair_exposed_s(ChunkWork(C, X, A, 0.3), ChunkWork(C[::-1], X[::-1], A[::-1], 0.3), FWD_SHARE)
    one = [pair_exposed_s(ChunkWork(C[i], X[i], A[i], 0.3), ChunkWork(C[2 - i], X[2 - i], A[2 - i], 0.3), FWD_SHARE)
           for i in range(3)]
    assert arr.tolist() == pytest.approx(one, rel=1e-15)
    assert pair_exposed_s(ChunkWork(18.0, 12.0), ChunkWork(18.0, 12.0), FWD_SHARE) == chunk_pair_exposed_s(
        ChunkWork(18.0, 12.0), ChunkWork(18.0, 12.0), FWD_SHARE)


def test_step_order_counts_cover_every_chunk():
    """Every rank runs m/2 forwards and m/2 backwards of each phase (DualPipe; DualPipeV: m of each chunk)."""
    for n in (1, 2, 3, 4):
        for h in range(n):
            for main, total in (((16 // 2) - 2 * n + h + 1, 8), (16 - 2 * n + h + 1, 16)):
                k = step_order_counts(n, h, main, h == n - 1)
                assert k["F0"] + k["FB01"] == total and k["B1"] + k["FB01"] == total
                assert k["F1"] + k["FB10"] == total and k["B0"] + k["FB10"] == total


@settings(max_examples=60, deadline=None)
@given(pipelines())
def test_rank_busy_time_is_the_step_orders(case):
    """The closed form's m·(rank row) is exactly the simulated rank's busy time (the sum of its operations: the
    pairs' exposure, the lone chunks' full all-to-all, all the compute), lopsided splits included."""
    schedule, C, X, m, w = case
    sim = _simulate(schedule, C, X, m, w)
    for row, busy in zip(_rows(schedule, C, X, m), sim.busy_s):
        assert m * row == pytest.approx(busy, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(pipelines())
def test_fill_busy_drain_path_never_exceeds_the_simulated_step(case):
    """Every path through the step order's dependencies (a rank's operations in order, each stage's input from
    the stage before) is at most the simulated step: the fill, a rank's whole step and the drain
    (:func:`_fill_busy_drain_step`) included, lopsided splits and lone chunks' all-to-all included."""
    schedule, C, X, m, w = case
    assert _fill_busy_drain_step(schedule, C, X, m, w) <= _simulate(schedule, C, X, m, w).step_s * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(pipelines())
def test_op_graph_longest_path_is_the_simulated_step(case):
    """The dependency graph :func:`_dwell_path_step` searches is the simulation's: its longest path is the
    simulated step (two separate codings of the step orders' dependencies)."""
    schedule, C, X, m, w = case
    graph = op_graph(schedule, C, X, m, FWD_SHARE, w)
    assert longest_path_s(graph) == pytest.approx(_simulate(schedule, C, X, m, w).step_s, rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(pipelines())
def test_dwell_path_step_within_band_of_simulation(case):
    """The issue-19 band for the path family :func:`_dwell_path_step` (six dwells): every path of it is a path of
    the step order, so it is never above the simulated step, and it is within 2 % below it over random per-chunk
    times, lopsided splits included (500 seeded draws: 0.995-1.000; two dwells, the fill-busy-drain shape, reach
    0.915, so the lower edge can fail)."""
    schedule, C, X, m, w = case
    sim = _simulate(schedule, C, X, m, w).step_s
    path = _dwell_path_step(schedule, C, X, m, w)
    assert path <= sim * (1 + 1e-9)
    assert path >= sim * 0.98


@settings(max_examples=80, deadline=None, derandomize=True)
@given(pipelines())
def test_pair_averaged_dwell_path_within_band_of_simulation(case):
    """The same paths with each rank's F&B pairs at their mean time (:func:`_pair_averaged_dwell_path_step`: the
    rank's row and its stages' lone chunks, what a solver would need) stay in the issue-19 band (500 seeded
    draws: 0.990-1.013); with rank rows alone (:func:`_row_scaled_dwell_path_step`) they do not (0.757-1.033).
    Derandomized, so that every run checks the same draws."""
    schedule, C, X, m, w = case
    ratio = _pair_averaged_dwell_path_step(schedule, C, X, m, w) / _simulate(schedule, C, X, m, w).step_s
    assert 0.98 <= ratio <= 1.05


def test_lopsided_split_costs_more_in_the_simulation_and_the_closed_form():
    """DualPipe on 4 ranks, rank pair (0, 3) holding [3 dense | 27 MoE] vs [15 | 15] MoE layers (per-layer compute
    1 dense, 1.2 MoE; MoE all-to-all 0.8 per layer), ranks 1 and 2 [16 | 15]: both the simulation and the closed
    form price the lopsided split slower."""
    def case(first, last, first_dense):
        C = [first_dense * 1.0 + (first - first_dense) * 1.2, 16 * 1.2, 15 * 1.2, last * 1.2]
        X = [(first - first_dense) * 0.8, 16 * 0.8, 15 * 0.8, last * 0.8]
        return C, X
    m = 16
    lop, bal = case(3, 27, 3), case(15, 15, 3)
    sim_lop, sim_bal = _simulate(Schedule.DUALPIPE, *lop, m, 0.0).step_s, _simulate(Schedule.DUALPIPE, *bal, m, 0.0).step_s
    cf_lop, cf_bal = _closed_form_step(Schedule.DUALPIPE, *lop, m, 0.0), _closed_form_step(Schedule.DUALPIPE, *bal, m, 0.0)
    assert sim_lop > sim_bal * 1.05
    assert cf_lop > cf_bal * 1.05


@pytest.mark.xfail(strict=True, reason=(
    "issue 19 acceptance band not met: over these draws the closed form's step (m·t_max + the DualPipe Table 2 "
    "bubble over rank rows with Alpa's uneven weights) is 0.787-1.156 of the simulated step (393 of 500 draws in "
    "0.98-1.05); with no all-to-all at all 0.934-1.163 (413 of 500); equal chunks 1.000-1.036 (python "
    "tests/costmodel/schedules/test_paired_overlap.py). The rank busy time matches exactly (test_rank_busy_time_is_the_step_orders). "
    "Over-estimates: a rank whose partner ranks are faster waits less than Table 2's slots priced at their rows. "
    "Under-estimates: the fill and drain chains per stage, a lone chunk's exposed all-to-all on them, and the "
    "round trips through the neighbouring ranks that a rank waits on inside its step. The fill-busy-drain path "
    "(_fill_busy_drain_step: fill and drain per stage, a rank's whole step) is the step in the median draw but "
    "0.784-1.000 of it (337 of 500 in the band): the round trips are missing. The family with them, "
    "_dwell_path_step (six dwells on ranks, moves at the first or last operation of a type in a step), is "
    "0.995-1.000 of it (500 of 500; test_dwell_path_step_within_band_of_simulation), but it prices each rank's "
    "operations from both its chunks' compute and all-to-all, which the solver's tables do not hold per split, "
    "and takes a longest path that CP-SAT's m·t_max + bubble objective does not express"))
@settings(max_examples=80, deadline=None)
@given(pipelines())
def test_closed_form_step_within_band_of_simulation(case):
    schedule, C, X, m, w = case
    assume(sum(C) > 0)
    sim = _simulate(schedule, C, X, m, w).step_s
    closed = _closed_form_step(schedule, C, X, m, w)
    assert closed <= sim * 1.05
    assert closed >= sim * 0.98


def _band(draws: int = 500, seed: int = 0, comm: bool = True, form=_closed_form_step,
          compute: tuple[float, float] = (0.1, 2.0)) -> tuple[float, float, int]:
    """(least, largest, how many in the band 0.98-1.05) of ``form`` / simulated step over ``draws`` seeded draws
    from :func:`pipelines`' ranges (``comm`` False: no all-to-all at all, the bubble formula alone; ``compute``
    the range of a stage's compute, narrower: nearly equal stages, only the all-to-all mix differs)."""
    import random
    rng = random.Random(seed)
    lo, hi, inside = float("inf"), 0.0, 0
    for _ in range(draws):
        schedule = rng.choice([Schedule.DUALPIPE, Schedule.DUALPIPEV])
        ranks = rng.choice([2, 4, 6, 8])
        stages = ranks if schedule is Schedule.DUALPIPE else 2 * ranks
        m = 2 * ranks * rng.randint(1, 4)
        C = [rng.uniform(*compute) for _ in range(stages)]
        X = [c * rng.choice([0.0, 0.3, 0.8, 1.5, 3.0]) * comm for c in C]
        w = rng.choice([0.0, 0.3, 0.5])
        ratio = form(schedule, C, X, m, w) / _simulate(schedule, C, X, m, w).step_s
        lo, hi, inside = min(lo, ratio), max(hi, ratio), inside + (0.98 <= ratio <= 1.05)
    return lo, hi, inside


if __name__ == "__main__":  # python -m tests.costmodel.schedules.test_paired_overlap: the measured bands of the xfail above
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[3]))
    for name, form in (("closed form", _closed_form_step), ("fill-busy-drain path", _fill_busy_drain_step)):
        for with_comm in (True, False):
            low, high, inside = _band(comm=with_comm, form=form)
            print(f"{name} / simulated step over 500 draws, all-to-all {with_comm}: {low:.3f} .. {high:.3f}, "
                  f"{inside} in 0.98-1.05")
    from functools import partial
    for dwells in (1, 2, 3, 4, 6):
        low, high, inside = _band(form=partial(_dwell_path_step, dwells=dwells))
        print(f"dwell paths, {dwells} dwells / simulated step over 500 draws: {low:.3f} .. {high:.3f}, "
              f"{inside} in 0.98-1.05")
    for name, form in (("rank rows only", _row_scaled_dwell_path_step),
                       ("rows and lone chunks, pairs averaged", _pair_averaged_dwell_path_step)):
        low, high, inside = _band(form=form)
        print(f"dwell paths over {name} (6 dwells) / simulated step over 500 draws: {low:.3f} .. {high:.3f}, "
              f"{inside} in 0.98-1.05")
    for schedule, ranks, m in ((Schedule.DUALPIPE, 16, 64), (Schedule.DUALPIPE, 16, 256), (Schedule.DUALPIPEV, 8, 32),
                               (Schedule.DUALPIPEV, 8, 128)):
        n = ranks if schedule is Schedule.DUALPIPE else 2 * ranks
        graph = op_graph(schedule, [1.0] * n, [0.0] * n, m, FWD_SHARE, 0.3)
        print(f"{schedule} on {ranks} ranks, m = {m}: {sum(map(len, graph.orders))} operations, at most "
              f"{max(map(len, _events(graph)))} event operations per rank (_events, where dwells may begin or end)")
    for with_comm in (True, False):
        low, high, inside = _band(comm=with_comm, compute=(0.95, 1.05))
        print(f"closed form, stage compute 0.95-1.05, all-to-all {with_comm}: {low:.3f} .. {high:.3f}, "
              f"{inside} in 0.98-1.05")
    equal = [(s, r, 2 * r * k, w) for s in (Schedule.DUALPIPE, Schedule.DUALPIPEV) for r in (2, 4, 6, 8) for k in (1, 2, 4)
             for w in (0.0, 0.3, 0.5)]
    ratios = [_closed_form_step(s, [1.0] * n, [0.0] * n, m, w) / _simulate(s, [1.0] * n, [0.0] * n, m, w).step_s
              for s, r, m, w in equal for n in [r if s is Schedule.DUALPIPE else 2 * r]]
    print(f"equal chunks, no all-to-all ({len(equal)} cases): closed form / simulated step "
          f"{min(ratios):.3f} .. {max(ratios):.3f}")
