"""Discrete-event simulation of DualPipe's and DualPipeV's step orders, with per-chunk compute, all-to-all and
other times as inputs: a second coding of costmodel/schedules/dualpipe_steps.py's longest path (tests/costmodel/schedules/test_paired_overlap.py
checks costmodel/schedules/paired_overlap.py's closed form against it, and the evaluator's step-order step against it).

The step orders are costmodel/schedules/dualpipe_steps.py's (``step_orders``, from
deepseek-ai/DualPipe@3da1bbea53606543d7f5f232338fc58096db30e3 ``dualpipe/dualpipe.py:358-417`` and
``dualpipe/dualpipev.py:330-395``); the durations are written out here per operation (:func:`op_duration_s`). Each rank list-schedules its operations in that order, each as soon
as its input is ready (the previous stage's forward, the next stage's backward, or for the model's last stage its
own forward) and the rank is free, tracking micro-batches by counters instead of graph edges. Pipeline
send/receive is free. Stage s's chunk has compute ``C[s]`` (forward share ``f``), all-to-all ``X[s]`` and other
time ``E[s]`` (default none); with its attention time ``A[s]`` (and the dispatch's share of each pass's all-to-all)
an F&B pair is priced per component, else per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

from parplan.costmodel.schedules.dualpipe_steps import (Op, OpGraph, StageWork, op_parts, pass_stage,  # noqa: F401
                                              phase_stages, step_orders)
from parplan.costmodel.schedules.dualpipe_steps import op_graph as steps_op_graph
from parplan.costmodel.schedules.paired_overlap import ChunkWork, pair_exposed_s
from parplan.costmodel.schedules.schedule import Schedule


def op_duration_s(op: Op, parts: list[tuple[str, int]], work: StageWork, deferred: list[float]) -> float:
    """An operation's duration, written out per operation (costmodel/schedules/dualpipe_steps.py computes them element-wise):
    ``parts`` its (kind, model stage) passes, ``deferred`` the rank's queued weight-gradient work (FIFO as
    ``WeightGradStore``): a zero-bubble backward appends, W pops."""
    C, X, f, w = work.C, work.X, work.f, work.w
    E = work.E if work.E is not None else [0.0] * len(C)
    if op.kind == "W":
        return deferred.pop(0)
    if op.kind == "FB":
        (_, sa), (_, sb) = parts
        A, share = work.A, work.dispatch_share
        chunk = (lambda s: ChunkWork(C[s], X[s])) if A is None else (lambda s: ChunkWork(C[s], X[s], A[s], share))
        return f * (C[sa] + E[sa]) + (1 - f) * (C[sb] + E[sb]) + pair_exposed_s(chunk(sa), chunk(sb), f)
    kind, s = parts[0]
    time = f * (C[s] + E[s]) if kind == "F" else (1 - f) * (C[s] + E[s])
    if kind == "B" and op.zb:
        deferred.append(w * time)
        time *= 1 - w
    return time + X[s] / 2


def _run(orders: list[list[Op]], stage_of, next_stage, prev_stage, mbs: list[list[tuple[str, int]]],
         work: StageWork) -> "Simulated":
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
                for kind, phase in op_parts(op):
                    flow, s = stage_of(r, phase)
                    j = counters[r].get((kind, phase), 0)
                    t = ready(kind, flow, s, j)
                    if t is None:
                        break
                    starts.append(t)
                    keys.append((kind, flow, s, j, phase))
                else:
                    start = max(starts)
                    dur = op_duration_s(op, [(kind, s) for kind, _, s, _, _ in keys], work, deferred[r])
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


def simulate_dualpipe(C: list[float], X: list[float], m: int, f: float, w: float, E=None, A=None,
                      dispatch_share: float = 0.5) -> Simulated:
    """DualPipe on p = len(C) ranks, ``m`` micro-batches (half from each end); rank r runs stage r of the flow
    entering at rank 0 and stage p-1-r of the flow entering at rank p-1; for the first half of the ranks phase 0
    is the first flow, for the second half the other (dualpipe.py:355-356)."""
    p = len(C)
    orders = step_orders(Schedule.DUALPIPE, p, m)

    def stage_of(r, phase):
        return pass_stage(Schedule.DUALPIPE, p, r, phase)

    def next_stage(flow, s):  # model stage s of flow 0 is on rank s, of flow 1 on rank p-1-s; stages by model index
        return None if s == p - 1 else s + 1

    def prev_stage(flow, s):
        return None if s == 0 else s - 1

    # stage_of returns the *rank* index for flow 0 and p-1-rank for flow 1: both are the model stage index
    mbs = [{0: m // 2, 1: m // 2} for _ in range(p)]
    return _run(orders, stage_of, next_stage, prev_stage, mbs, StageWork(C, X, f, w, E, A, dispatch_share))


def simulate_dualpipev(C: list[float], X: list[float], m: int, f: float, w: float, E=None, A=None,
                       dispatch_share: float = 0.5) -> Simulated:
    """DualPipeV on P = len(C)/2 ranks, ``m`` micro-batches; rank r holds chunk 0 = stage r and chunk 1 =
    stage 2P-1-r (dualpipev.py), every micro-batch through all 2P stages."""
    P = len(C) // 2
    orders = step_orders(Schedule.DUALPIPEV, P, m)

    def stage_of(r, phase):
        return pass_stage(Schedule.DUALPIPEV, P, r, phase)

    mbs = [{0: m, 1: m} for _ in range(P)]
    return _run(orders, stage_of, lambda _, s: None if s == 2 * P - 1 else s + 1,
                lambda _, s: None if s == 0 else s - 1, mbs, StageWork(C, X, f, w, E, A, dispatch_share))


def op_graph(schedule: str, C: list[float], X: list[float], m: int, f: float, w: float) -> OpGraph:
    """costmodel/schedules/dualpipe_steps.py :func:`~parplan.costmodel.schedules.dualpipe_steps.op_graph` over per-stage compute and
    all-to-all alone (no other time)."""
    return steps_op_graph(schedule, StageWork(C, X, f, w), m)
