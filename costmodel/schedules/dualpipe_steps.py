"""DualPipe's and DualPipeV's step orders as a dependency graph, and the step its longest path gives.

The step orders are deepseek-ai/DualPipe@3da1bbea53606543d7f5f232338fc58096db30e3 ``dualpipe/dualpipe.py:358-417``
(``DualPipe.step``, Steps 1-8, with ``half_rank`` and the middle ranks' un-overlapped first main step) and
``dualpipe/dualpipev.py:330-395`` (``DualPipeV.step``, the same eight steps with ``rank`` and the last rank's
un-overlapped first main step). Each rank runs its operations in that order, each once its input is ready (the
previous stage's forward, the next stage's backward, or for the model's last stage its own forward) and the rank
is free, so the step is the longest path through the graph whose edges are a rank's consecutive operations and
each operation's inputs (:func:`step_order_s`). An operation's duration, stage s having per micro-batch layer
compute ``C[s]`` (forward share ``f``), all-to-all ``X[s]`` (forward + backward, none hidden) and other time
``E[s]`` (recomputation, TP/CP collectives, pipeline send/receive, ZeRO traffic, the embedding and the head:
split F : B as the compute, hiding nothing):

* a forward or backward chunk alone: its share of ``C + E`` plus half the chunk's all-to-all; ``enable_zb``
  backwards leave the weight-gradient share ``w`` of their backward to a later ``_weight_chunk``;
* an overlapped F&B chunk (``_forward_backward_chunk``): both shares plus what each one's layer compute cannot
  cover of the other's all-to-all (:func:`~parplan.costmodel.schedules.paired_overlap.pair_exposed_s`);
* a weight chunk: the deferred share ``w`` of a zero-bubble backward (FIFO, as ``WeightGradStore``).

The evaluator reports this step beside its closed form for DualPipe and DualPipeV plans
(``Metrics.step_order_step_s``, costmodel/evaluation/evaluate.py); ``tests/dualpipe_sim.py`` list-schedules the same step
orders with its own scalar durations, a second coding, and ``tests/costmodel/schedules/test_paired_overlap.py`` measures the closed form
against both.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from parplan.costmodel.schedules.paired_overlap import ChunkWork, pair_exposed_s
from parplan.costmodel.schedules.schedule import Schedule


@dataclass(frozen=True)
class Op:
    kind: str  # "F", "B", "FB", "W"
    phases: tuple[int, ...]  # F/B: (phase,); FB: (forward phase, backward phase)
    zb: bool = False
    step: int = 0  # the step (1-8) of dualpipe.py:358-417 / dualpipev.py:330-395 the operation belongs to


_op = functools.lru_cache(maxsize=None)(Op)  # one shared instance per distinct operation (Op is frozen)


def _orders(n: int, r: int, main: int, unoverlapped_first: bool) -> list[Op]:
    ops: list[Op] = [_op("F", (0,), step=1)] * ((n - r - 1) * 2)  # Step 1: nF0
    for _ in range(r + 1):  # Step 2: nF0F1
        ops += [_op("F", (0,), step=2), _op("F", (1,), step=2)]
    for _ in range(n - r - 1):  # Step 3: nB1W1F1 (zero bubble)
        ops += [_op("B", (1,), zb=True, step=3), _op("W", (), step=3), _op("F", (1,), step=3)]
    for i in range(main):  # Step 4: nF0B1F1B0
        if i == 0 and unoverlapped_first:  # "We don't overlap these two chunks to further reduce bubble size."
            ops += [_op("F", (0,), step=4), _op("B", (1,), step=4)]
        else:
            ops.append(_op("FB", (0, 1), step=4))
        ops.append(_op("FB", (1, 0), step=4))
    for _ in range(n - r - 1):  # Step 5: nB1F1B0
        ops += [_op("B", (1,), step=5), _op("FB", (1, 0), step=5)]
    zb = False
    for i in range(r + 1):  # Step 6: nB1B0, the second half with zero bubble
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        ops.append(_op("B", (1,), zb=zb, step=6))
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        ops.append(_op("B", (0,), zb=zb, step=6))
    for _ in range(n - r - 1):  # Step 7: nWB0
        ops += [_op("W", (), step=7), _op("B", (0,), zb=True, step=7)]
    ops += [_op("W", (), step=8)] * (r + 1)  # Step 8: nW
    return ops


def step_orders(schedule: Schedule, ranks: int, m: int) -> list[list[Op]]:
    """Every rank's operations in step order: DualPipe on ``ranks`` = p ranks (``half_rank`` = min(r, p-1-r),
    dualpipe.py:358-417), DualPipeV on ``ranks`` = P ranks (dualpipev.py:330-395)."""
    if schedule is Schedule.DUALPIPE:
        half = ranks // 2
        return [_orders(half, h, m // 2 - ranks + h + 1, unoverlapped_first=(h == half - 1))
                for h in (min(r, ranks - 1 - r) for r in range(ranks))]
    return [_orders(ranks, r, m - 2 * ranks + r + 1, unoverlapped_first=(r == ranks - 1)) for r in range(ranks)]


def phase_stages(schedule: Schedule, ranks: int, r: int) -> tuple[int, int]:
    """(phase 0, phase 1) of rank ``r`` as model stage indices (the index of ``C`` and ``X``): DualPipe's phase 0
    is stage min(r, p-1-r) of the flow entering at the rank's own end, phase 1 stage p-1-min(r, p-1-r)
    (dualpipe.py:355-356); DualPipeV's chunk 0 is stage r, chunk 1 stage 2P-1-r."""
    if schedule is Schedule.DUALPIPE:
        h = min(r, ranks - 1 - r)
        return h, ranks - 1 - h
    return r, 2 * ranks - 1 - r


def pass_stage(schedule: Schedule, ranks: int, r: int, phase: int) -> tuple[int, int]:
    """(flow, model stage) of rank ``r``'s phase ``phase``: DualPipe's phase 0 is the flow entering at the rank's
    own end (flow 0 enters at rank 0, where model stage s lies on rank s; flow 1 at rank p-1, stage s on rank
    p-1-s; dualpipe.py:355-356); DualPipeV has one flow, chunk 0 = stage r, chunk 1 = stage 2P-1-r."""
    if schedule is Schedule.DUALPIPE:
        flow = phase if r < ranks // 2 else 1 - phase
        return flow, (r if flow == 0 else ranks - 1 - r)
    return 0, (r if phase == 0 else 2 * ranks - 1 - r)


def op_parts(op: Op) -> list[tuple[str, int]]:
    """The (kind, phase) chunk passes an operation runs: an F&B pair both, a weight chunk none."""
    if op.kind == "FB":
        return [("F", op.phases[0]), ("B", op.phases[1])]
    return [] if op.kind == "W" else [(op.kind, op.phases[0])]


@dataclass(frozen=True)
class StageWork:
    """Per model stage, per micro-batch: layer compute ``C`` (hides a partner's all-to-all), all-to-all ``X`` and
    other time ``E`` (module docstring), with forward share ``f`` and zero-bubble weight share ``w``; ``A`` the
    attention part of ``C`` and ``dispatch_share`` the dispatch's of each pass's ``X``, with which an F&B pair is
    priced per component (paired_overlap.ChunkWork; ``A`` None: per chunk)."""
    C: Sequence[float]
    X: Sequence[float]
    f: float
    w: float
    E: Optional[Sequence[float]] = None
    A: Optional[Sequence[float]] = None
    dispatch_share: float = 0.5


def step_order_defined(schedule: Schedule, ranks: int, m: int) -> bool:
    """Whether the upstream step order exists for ``m`` micro-batches on ``ranks`` ranks: DualPipe asserts an even
    rank count and an even ``num_chunks >= num_ranks * 2`` (half from each end), DualPipeV ``num_chunks >=
    num_ranks * 2`` (dualpipe.py / dualpipev.py ``step``; costmodel/evaluation/legality.py states the same rules)."""
    if schedule is Schedule.DUALPIPE:
        return ranks >= 2 and ranks % 2 == 0 and m % 2 == 0 and m >= 2 * ranks
    return ranks >= 1 and m >= 2 * ranks


@dataclass(frozen=True)
class StepStructure:
    """The step order's graph without durations, its operations in a topological order: per operation its (rank,
    index in the rank's order), kind (0 F, 1 B, 2 F&B, 3 W), stage (F&B: the forward's; W: the zero-bubble backward
    whose share it runs, FIFO per rank, as ``WeightGradStore``), the F&B's backward stage, whether it is a
    zero-bubble backward, its inputs' positions (the previous stage's forward, the next stage's backward, or for the
    model's last stage its own forward) and the position of its rank's previous operation (-1: none)."""
    node: tuple[tuple[int, int], ...]
    kind: np.ndarray
    stage: np.ndarray
    stage_b: np.ndarray
    zb: np.ndarray
    inputs: tuple[tuple[int, ...], ...]
    prev: tuple[int, ...]


_KIND = {"F": 0, "B": 1, "FB": 2, "W": 3}


@functools.lru_cache(maxsize=32)
def step_structure(schedule: Schedule, ranks: int, m: int) -> StepStructure:
    """The step orders' operations and edges with integer ids, in Kahn's topological order."""
    stages = ranks if schedule is Schedule.DUALPIPE else 2 * ranks
    orders = step_orders(schedule, ranks, m)
    start = [0]
    for ops in orders:
        start.append(start[-1] + len(ops))
    made: dict = {}
    kind, stage, stage_b, zb, needs = [], [], [], [], []
    parts_of: dict = {}
    for r, ops in enumerate(orders):
        seen: dict = {}
        queue: list[int] = []  # the stages of the rank's zero-bubble backwards not yet weighted (FIFO)
        where = [pass_stage(schedule, ranks, r, phase) for phase in (0, 1)]
        for op in ops:
            parts, need = [], []
            if op not in parts_of:
                parts_of[op] = op_parts(op)
            for k, phase in parts_of[op]:
                flow, st = where[phase]
                j = seen.get((k, phase), 0)
                seen[(k, phase)] = j + 1
                made[(k, flow, st, j)] = len(kind)
                parts.append(st)
                if k == "F" and st > 0:
                    need.append(("F", flow, st - 1, j))
                elif k == "B":
                    need.append(("F", flow, st, j) if st == stages - 1 else ("B", flow, st + 1, j))
            if op.kind == "W":
                parts = [queue.pop(0)]
            elif op.kind == "B" and op.zb:
                queue.append(parts[0])
            kind.append(_KIND[op.kind])
            stage.append(parts[0])
            stage_b.append(parts[1] if len(parts) > 1 else 0)
            zb.append(op.zb)
            needs.append(need)
    node = [(r, i) for r, ops in enumerate(orders) for i in range(len(ops))]
    inputs = [[made[x] for x in need] for need in needs]
    prev = [n - 1 if i else -1 for n, (_, i) in enumerate(node)]
    order = _kahn([ins + ([p] if p >= 0 else []) for ins, p in zip(inputs, prev)])
    at = [0] * len(order)
    for k, n in enumerate(order):
        at[n] = k
    return StepStructure(tuple(node[n] for n in order), np.array(kind)[order], np.array(stage)[order],
                      np.array(stage_b)[order], np.array(zb, bool)[order],
                      tuple(tuple(at[x] for x in inputs[n]) for n in order),
                      tuple(at[prev[n]] if prev[n] >= 0 else -1 for n in order))


def _kahn(preds: list[list[int]]) -> list[int]:
    """A topological order of the nodes whose predecessors are ``preds`` (an AssertionError on a cycle)."""
    succ: list[list[int]] = [[] for _ in preds]
    indegree = [len(p) for p in preds]
    for n, ps in enumerate(preds):
        for p in ps:
            succ[p].append(n)
    ready = [n for n, d in enumerate(indegree) if d == 0]
    order = []
    while ready:
        n = ready.pop()
        order.append(n)
        for t in succ[n]:
            indegree[t] -= 1
            if indegree[t] == 0:
                ready.append(t)
    if len(order) != len(preds):
        raise AssertionError("the step order deadlocked")
    return order


@dataclass(frozen=True)
class OpGraph:
    """The step orders as a dependency graph: ``orders[r][i]`` rank r's i-th operation, ``durations_s[r][i]`` its
    duration, ``inputs[r][i]`` the (rank, index) operations whose outputs it reads."""
    orders: list[list[Op]]
    durations_s: list[list[float]]
    inputs: list[list[list[tuple[int, int]]]]


def op_graph(schedule: Schedule, work: StageWork, m: int) -> OpGraph:
    """:func:`step_order_s`'s graph and durations by (rank, index), over ``len(work.C)`` model stages (DualPipe: one
    per rank; DualPipeV: two) and ``m`` micro-batches: what tests/costmodel/schedules/test_paired_overlap.py searches paths of."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    st, orders = step_structure(schedule, ranks, m), step_orders(schedule, ranks, m)
    durations = [[0.0] * len(ops) for ops in orders]
    inputs: list[list[list[tuple[int, int]]]] = [[[] for _ in ops] for ops in orders]
    for (r, i), d, ins in zip(st.node, op_durations_s(st, work), st.inputs):
        durations[r][i] = d
        inputs[r][i] = [st.node[x] for x in ins]
    return OpGraph(orders, durations, inputs)


def clear_structure_cache() -> None:
    """Forget the step orders' graphs :func:`step_order_s` has built (benchmarks time each call as from a fresh
    process: benchmarks/solver_speed.py)."""
    step_structure.cache_clear()


def op_durations_s(st: StepStructure, work: StageWork) -> list[float]:
    """Every operation's duration (module docstring), element-wise over the structure."""
    C, X = np.asarray(work.C, float), np.asarray(work.X, float)
    T = C + (np.zeros_like(C) if work.E is None else np.asarray(work.E, float))
    f, w, a, b = work.f, work.w, st.stage, st.stage_b
    lone_f = f * T[a] + X[a] / 2
    lone_b = np.where(st.zb, (1 - f) * T[a] * (1 - w), (1 - f) * T[a]) + X[a] / 2
    A, share = (None, None) if work.A is None else (np.asarray(work.A, float), work.dispatch_share)
    chunk = (lambda s: ChunkWork(C[s], X[s])) if A is None else (lambda s: ChunkWork(C[s], X[s], A[s], share))
    pair = f * T[a] + (1 - f) * T[b] + pair_exposed_s(chunk(a), chunk(b), f)
    weight = w * ((1 - f) * T[a])
    return np.choose(st.kind, [lone_f, lone_b, pair, weight]).tolist()


def step_order_s(schedule: Schedule, work: StageWork, m: int) -> float:
    """The pipeline's step (no DP term) by the step order of ``schedule`` over ``work``: the longest path through
    the graph (cached per (schedule, ranks, m)) with the durations computed element-wise; a ValueError where the
    step order does not exist (:func:`step_order_defined`)."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    if not step_order_defined(schedule, ranks, m):
        raise ValueError(f"{schedule} has no step order for {m} micro-batches on {ranks} ranks")
    st = step_structure(schedule, ranks, m)
    end: list[float] = []
    for d, ins, prev in zip(op_durations_s(st, work), st.inputs, st.prev):
        end.append(d + max([end[x] for x in ins] + ([end[prev]] if prev >= 0 else [0.0])))
    return max(end)
