"""Discrete-event simulation of DualPipe's and DualPipeV's step orders, with per-chunk compute and all-to-all
times as inputs (tests/test_dualpipe_sim.py checks costmodel/paired_overlap.py's closed form against it).

The step orders are deepseek-ai/DualPipe@3da1bbea53606543d7f5f232338fc58096db30e3 ``dualpipe/dualpipe.py:358-417``
(``DualPipe.step``, Steps 1-8, with ``half_rank`` and the middle ranks' un-overlapped first main step) and
``dualpipe/dualpipev.py:330-395`` (``DualPipeV.step``, the same eight steps with ``rank`` and the last rank's
un-overlapped first main step). Each rank runs its operations in that order, each as soon as its input is ready
(the previous stage's forward, the next stage's backward, or for the model's last stage its own forward) and
the rank is free. An operation's duration:

* a forward or backward chunk alone: its compute plus its all-to-all (half the chunk's, none hidden);
  ``enable_zb`` backwards leave the weight-gradient share ``w`` of their compute to a later ``_weight_chunk``;
* an overlapped F&B chunk (``_forward_backward_chunk``): both computations plus what each one's compute cannot
  cover of the other's all-to-all (``pair_exposed_s``: the forward's dispatch/combine runs during the backward's
  compute and vice versa);
* a weight chunk: the share ``w`` of the deferred backward's compute (FIFO, as ``WeightGradStore``).

Pipeline send/receive is free. Stage s's chunk has compute ``C[s]`` (forward share ``f``) and all-to-all ``X[s]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.paired_overlap import ChunkWork, pair_exposed_s


@dataclass(frozen=True)
class Op:
    kind: str  # "F", "B", "FB", "W"
    phases: tuple[int, ...]  # F/B: (phase,); FB: (forward phase, backward phase)
    zb: bool = False
    step: int = 0  # the step (1-8) of dualpipe.py:358-417 / dualpipev.py:330-395 the operation belongs to


def _orders(n: int, r: int, main: int, unoverlapped_first: bool) -> list[Op]:
    ops: list[Op] = [Op("F", (0,), step=1)] * ((n - r - 1) * 2)  # Step 1: nF0
    for _ in range(r + 1):  # Step 2: nF0F1
        ops += [Op("F", (0,), step=2), Op("F", (1,), step=2)]
    for _ in range(n - r - 1):  # Step 3: nB1W1F1 (zero bubble)
        ops += [Op("B", (1,), zb=True, step=3), Op("W", (), step=3), Op("F", (1,), step=3)]
    for i in range(main):  # Step 4: nF0B1F1B0
        if i == 0 and unoverlapped_first:  # "We don't overlap these two chunks to further reduce bubble size."
            ops += [Op("F", (0,), step=4), Op("B", (1,), step=4)]
        else:
            ops.append(Op("FB", (0, 1), step=4))
        ops.append(Op("FB", (1, 0), step=4))
    for _ in range(n - r - 1):  # Step 5: nB1F1B0
        ops += [Op("B", (1,), step=5), Op("FB", (1, 0), step=5)]
    zb = False
    for i in range(r + 1):  # Step 6: nB1B0, the second half with zero bubble
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        ops.append(Op("B", (1,), zb=zb, step=6))
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        ops.append(Op("B", (0,), zb=zb, step=6))
    for _ in range(n - r - 1):  # Step 7: nWB0
        ops += [Op("W", (), step=7), Op("B", (0,), zb=True, step=7)]
    ops += [Op("W", (), step=8)] * (r + 1)  # Step 8: nW
    return ops


def step_orders(schedule: str, ranks: int, m: int) -> list[list[Op]]:
    """Every rank's operations in step order: DualPipe on ``ranks`` = p ranks (``half_rank`` = min(r, p-1-r),
    dualpipe.py:358-417), DualPipeV on ``ranks`` = P ranks (dualpipev.py:330-395)."""
    if schedule == "dualpipe":
        half = ranks // 2
        return [_orders(half, h, m // 2 - ranks + h + 1, unoverlapped_first=(h == half - 1))
                for h in (min(r, ranks - 1 - r) for r in range(ranks))]
    return [_orders(ranks, r, m - 2 * ranks + r + 1, unoverlapped_first=(r == ranks - 1)) for r in range(ranks)]


def phase_stages(schedule: str, ranks: int, r: int) -> tuple[int, int]:
    """(phase 0, phase 1) of rank ``r`` as model stage indices (the index of ``C`` and ``X``): DualPipe's phase 0
    is stage min(r, p-1-r) of the flow entering at the rank's own end, phase 1 stage p-1-min(r, p-1-r)
    (dualpipe.py:355-356); DualPipeV's chunk 0 is stage r, chunk 1 stage 2P-1-r."""
    if schedule == "dualpipe":
        h = min(r, ranks - 1 - r)
        return h, ranks - 1 - h
    return r, 2 * ranks - 1 - r


def pass_stage(schedule: str, ranks: int, r: int, phase: int) -> tuple[int, int]:
    """(flow, model stage) of rank ``r``'s phase ``phase``: DualPipe's phase 0 is the flow entering at the rank's
    own end (flow 0 enters at rank 0, where model stage s lies on rank s; flow 1 at rank p-1, stage s on rank
    p-1-s; dualpipe.py:355-356); DualPipeV has one flow, chunk 0 = stage r, chunk 1 = stage 2P-1-r."""
    if schedule == "dualpipe":
        flow = phase if r < ranks // 2 else 1 - phase
        return flow, (r if flow == 0 else ranks - 1 - r)
    return 0, (r if phase == 0 else 2 * ranks - 1 - r)


def _parts(op: Op) -> list[tuple[str, int]]:
    """The (kind, phase) chunk passes an operation runs: an F&B pair both, a weight chunk none."""
    if op.kind == "FB":
        return [("F", op.phases[0]), ("B", op.phases[1])]
    return [] if op.kind == "W" else [(op.kind, op.phases[0])]


def _duration(op: Op, parts: list[tuple[str, int]], C: list[float], X: list[float], f: float, w: float,
              deferred: list[float]) -> float:
    """An operation's duration (module docstring); ``parts`` its (kind, model stage) passes, ``deferred`` the
    rank's queued weight-gradient work (FIFO as ``WeightGradStore``): a zero-bubble backward appends, W pops."""
    if op.kind == "W":
        return deferred.pop(0)
    if op.kind == "FB":
        (_, sa), (_, sb) = parts
        return f * C[sa] + (1 - f) * C[sb] + pair_exposed_s(ChunkWork(C[sa], X[sa]), ChunkWork(C[sb], X[sb]), f)
    kind, s = parts[0]
    compute = f * C[s] if kind == "F" else (1 - f) * C[s]
    if kind == "B" and op.zb:
        deferred.append(w * compute)
        compute *= 1 - w
    return compute + X[s] / 2


def _run(orders: list[list[Op]], stage_of, next_stage, prev_stage, mbs: list[list[tuple[str, int]]],
         C: list[float], X: list[float], f: float, w: float) -> "Simulated":
    """List-schedule every rank's ops; ``stage_of(rank, phase)`` -> (flow, stage); ``next_stage(flow, s)`` the
    stage a forward feeds (None: the loss), ``prev_stage`` the stage a backward feeds."""
    ranks = len(orders)
    done: dict = {}
    ptr, free, busy = [0] * ranks, [0.0] * ranks, [0.0] * ranks
    counters = [dict() for _ in range(ranks)]
    deferred: list[list[float]] = [[] for _ in range(ranks)]

    def ready(kind, flow, s, j):
        if kind == "F":
            p = prev_stage(flow, s)
            return 0.0 if p is None else done.get(("F", flow, p, j))
        nxt = next_stage(flow, s)
        return done.get(("F", flow, s, j)) if nxt is None else done.get(("B", flow, nxt, j))

    moved = True
    while moved:
        moved = False
        for r in range(ranks):
            while ptr[r] < len(orders[r]):
                op = orders[r][ptr[r]]
                keys, starts = [], [free[r]]
                for kind, phase in _parts(op):
                    flow, s = stage_of(r, phase)
                    j = counters[r].get((kind, phase), 0)
                    t = ready(kind, flow, s, j)
                    if t is None:
                        break
                    starts.append(t)
                    keys.append((kind, flow, s, j, phase))
                else:
                    start = max(starts)
                    dur = _duration(op, [(kind, s) for kind, _, s, _, _ in keys], C, X, f, w, deferred[r])
                    free[r] = start + dur
                    busy[r] += dur
                    for kind, flow, s, j, phase in keys:
                        done[(kind, flow, s, j)] = free[r]
                        counters[r][(kind, phase)] = j + 1
                    ptr[r] += 1
                    moved = True
                    continue
                break
    assert all(ptr[r] == len(orders[r]) for r in range(ranks)), "the step order deadlocked"
    assert all(not d for d in deferred)
    for r in range(ranks):
        for (kind, phase), count in counters[r].items():
            assert count == mbs[r][phase], (r, kind, phase, count)
    return Simulated(max(free), busy)


@dataclass(frozen=True)
class Simulated:
    step_s: float  # the last rank to finish
    busy_s: list[float]  # per rank: the sum of its operations' durations


def simulate_dualpipe(C: list[float], X: list[float], m: int, f: float, w: float) -> Simulated:
    """DualPipe on p = len(C) ranks, ``m`` micro-batches (half from each end); rank r runs stage r of the flow
    entering at rank 0 and stage p-1-r of the flow entering at rank p-1; for the first half of the ranks phase 0
    is the first flow, for the second half the other (dualpipe.py:355-356)."""
    p = len(C)
    orders = step_orders("dualpipe", p, m)

    def stage_of(r, phase):
        return pass_stage("dualpipe", p, r, phase)

    def next_stage(flow, s):  # model stage s of flow 0 is on rank s, of flow 1 on rank p-1-s; stages by model index
        return None if s == p - 1 else s + 1

    def prev_stage(flow, s):
        return None if s == 0 else s - 1

    # stage_of returns the *rank* index for flow 0 and p-1-rank for flow 1: both are the model stage index
    mbs = [{0: m // 2, 1: m // 2} for _ in range(p)]
    return _run(orders, stage_of, next_stage, prev_stage, mbs, C, X, f, w)


def simulate_dualpipev(C: list[float], X: list[float], m: int, f: float, w: float) -> Simulated:
    """DualPipeV on P = len(C)/2 ranks, ``m`` micro-batches; rank r holds chunk 0 = stage r and chunk 1 =
    stage 2P-1-r (dualpipev.py), every micro-batch through all 2P stages."""
    P = len(C) // 2
    orders = step_orders("dualpipev", P, m)

    def stage_of(r, phase):
        return pass_stage("dualpipev", P, r, phase)

    mbs = [{0: m, 1: m} for _ in range(P)]
    return _run(orders, stage_of, lambda _, s: None if s == 2 * P - 1 else s + 1,
                lambda _, s: None if s == 0 else s - 1, mbs, C, X, f, w)


@dataclass(frozen=True)
class OpGraph:
    """The step orders as a dependency graph: ``orders[r][i]`` rank r's i-th operation, ``durations_s[r][i]`` its
    duration (:func:`_duration`), ``inputs[r][i]`` the (rank, index) operations whose outputs it reads (the
    previous stage's forward, the next stage's backward, or for the model's last stage its own forward)."""
    orders: list[list[Op]]
    durations_s: list[list[float]]
    inputs: list[list[list[tuple[int, int]]]]


def op_graph(schedule: str, C: list[float], X: list[float], m: int, f: float, w: float) -> OpGraph:
    """The :class:`OpGraph` of ``schedule`` over ``len(C)`` model stages (DualPipe: one per rank; DualPipeV: two);
    its longest path (an operation's start: the latest of its rank's previous operation and its inputs) is the
    step :func:`simulate_dualpipe` / :func:`simulate_dualpipev` list-schedule."""
    stages = len(C)
    ranks = stages if schedule == "dualpipe" else stages // 2
    orders = step_orders(schedule, ranks, m)
    made: dict = {}
    durations: list[list[float]] = []
    needs: list[list[list[tuple]]] = []
    for r, ops in enumerate(orders):
        seen: dict = {}
        deferred: list[float] = []
        durations.append([])
        needs.append([])
        for i, op in enumerate(ops):
            parts, need = [], []
            for kind, phase in _parts(op):
                flow, s = pass_stage(schedule, ranks, r, phase)
                j = seen.get((kind, phase), 0)
                seen[(kind, phase)] = j + 1
                made[(kind, flow, s, j)] = (r, i)
                parts.append((kind, s))
                if kind == "F" and s > 0:
                    need.append(("F", flow, s - 1, j))
                elif kind == "B":
                    need.append(("F", flow, s, j) if s == stages - 1 else ("B", flow, s + 1, j))
            durations[r].append(_duration(op, parts, C, X, f, w, deferred))
            needs[r].append(need)
    return OpGraph(orders, durations, [[[made[k] for k in need] for need in rank] for rank in needs])
