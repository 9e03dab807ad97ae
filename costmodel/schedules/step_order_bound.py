"""A proven lower bound of DualPipe's and DualPipeV's step order: per rank, the fill, its whole step and the drain.

The step order's step (:func:`~parplan.costmodel.schedules.dualpipe_steps.step_order_s`) is the longest path through
its dependency graph, so any one path is a lower bound of it. For each rank r this takes the longer of two paths
(issue 39 item 1; the family ``_fill_busy_drain_step`` of tests/costmodel/schedules/test_paired_overlap.py, here with
the evaluator's durations, other time E included):

* the fill: the first micro-batch's forward through the h stages before r's phase-0 stage (h = min(r, p-1-r) under
  DualPipe, dualpipe.py:355-356; r under DualPipeV, chunk 0 = stage r), each its rank's first operation, a lone
  chunk (``f·T + X/2``); then every operation of rank r in step order (its busy time, ``m·row_r``);
* after rank r's last backward (its phase 0's last micro-batch, Step 6/7 ends with ``B0``), either its trailing
  weight chunks (``W``, FIFO as ``WeightGradStore``) or that micro-batch's backward through the same h stages,
  each at least a zero-bubble backward ``(1-w)(1-f)·T + X/2``.

Per stage, not per rank row: a rank's two chunks may differ (a lopsided split). deepseek-ai/DualPipe@3da1bbea
``dualpipe/dualpipe.py:358-417``, ``dualpipe/dualpipev.py:330-395`` (the step orders
costmodel/schedules/dualpipe_steps.py codes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parplan.costmodel.schedules.dualpipe_steps import (StageWork, op_durations_s, step_structure, op_graph, phase_stages,
                                                        step_order_defined)
from parplan.costmodel.schedules.schedule import Schedule


def rank_fill_drain_s(schedule: Schedule, work: StageWork, ranks: int, r: int) -> tuple[float, float]:
    """(fill, drain) of rank ``r``: the h upstream stages' lone forwards and zero-bubble backwards (module docstring)."""
    C, X = np.asarray(work.C, float), np.asarray(work.X, float)
    T = C + (np.zeros_like(C) if work.E is None else np.asarray(work.E, float))
    h = phase_stages(schedule, ranks, r)[0]
    fill = float(np.sum(work.f * T[:h] + X[:h] / 2))
    drain = float(np.sum((1 - work.w) * (1 - work.f) * T[:h] + X[:h] / 2))
    return fill, drain


def fill_busy_drain_s(schedule: Schedule, work: StageWork, m: int) -> float:
    """The longest fill-busy-drain path of any rank (module docstring): never above ``step_order_s(schedule, work,
    m)`` (tests/costmodel/schedules/test_step_order_bound.py); a ValueError where the step order does not exist."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    if not step_order_defined(schedule, ranks, m):
        raise ValueError(f"{schedule} has no step order for {m} micro-batches on {ranks} ranks")
    g = op_graph(schedule, work, m)
    best = 0.0
    for r, (ops, durations) in enumerate(zip(g.orders, g.durations_s)):
        fill, drain = rank_fill_drain_s(schedule, work, ranks, r)
        last_backward = max(i for i, op in enumerate(ops) if op.kind in ("B", "FB"))
        tail = sum(durations[last_backward + 1:])
        best = max(best, fill + sum(durations) - tail + max(drain, tail))
    return best


@dataclass(frozen=True)
class PathForm:
    """One path through the step order's graph, compressed: how many of its operations are of each type (kind 0 F,
    1 B, 2 F&B, 3 W; stage; F&B's backward stage; zero-bubble). Priced over any :class:`StageWork` of the same
    (schedule, ranks, m) it is a path of that work's graph, so at most its step order: a cut, linear in the
    per-stage operation durations (:func:`path_form_s`), at most a few dozen types per rank whatever m."""
    kind: np.ndarray
    stage: np.ndarray
    stage_b: np.ndarray
    zb: np.ndarray
    count: np.ndarray


def critical_path_form(schedule: Schedule, work: StageWork, m: int) -> PathForm:
    """The longest path of ``work``'s step order (ties: the first predecessor), compressed: priced over ``work``
    itself it is ``step_order_s(schedule, work, m)``."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    if not step_order_defined(schedule, ranks, m):
        raise ValueError(f"{schedule} has no step order for {m} micro-batches on {ranks} ranks")
    st = step_structure(schedule, ranks, m)
    end: list[float] = []
    came: list[int] = []
    for d, ins, prev in zip(op_durations_s(st, work), st.inputs, st.prev):
        preds = list(ins) + ([prev] if prev >= 0 else [])
        best = max(preds, key=lambda x: end[x], default=-1)
        came.append(best)
        end.append(d + (end[best] if best >= 0 else 0.0))
    path, n = [], int(np.argmax(end))
    while n >= 0:
        path.append(n)
        n = came[n]
    keys, count = np.unique(np.stack([st.kind[path], st.stage[path], st.stage_b[path], st.zb[path].astype(int)]),
                            axis=1, return_counts=True)
    return PathForm(keys[0], keys[1], keys[2], keys[3].astype(bool), count)


def path_form_s(form: PathForm, work: StageWork) -> float:
    """``form``'s path priced over ``work``: each operation type's duration (dualpipe_steps' durations) times its
    count."""
    return float(np.dot(form.count, op_durations_s(form, work)))


def rank_path_forms(schedule: Schedule, work: StageWork, m: int) -> list[PathForm]:
    """For each rank, the longest path of ``work``'s step order through one of its operations, compressed (the
    first of them the critical path's length; each a path of any work's graph of the same (schedule, ranks, m), so a
    cut): what a search adds per answer to bound every rank's fill, busy time and drain at once."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    st = step_structure(schedule, ranks, m)
    d = op_durations_s(st, work)
    n = len(d)
    end, came, succ = [0.0] * n, [-1] * n, [[] for _ in range(n)]
    for i, (ins, prev) in enumerate(zip(st.inputs, st.prev)):
        preds = list(ins) + ([prev] if prev >= 0 else [])
        came[i] = max(preds, key=lambda x: end[x], default=-1)
        end[i] = d[i] + (end[came[i]] if came[i] >= 0 else 0.0)
        for x in preds:
            succ[x].append(i)
    rest, nxt = [0.0] * n, [-1] * n
    for i in reversed(range(n)):
        nxt[i] = max(succ[i], key=lambda x: rest[x], default=-1)
        rest[i] = d[i] + (rest[nxt[i]] if nxt[i] >= 0 else 0.0)
    best: dict[int, int] = {}
    for i, (r, _) in enumerate(st.node):
        if r not in best or end[i] + rest[i] - d[i] > end[best[r]] + rest[best[r]] - d[best[r]]:
            best[r] = i
    return forms_through(st, [best[r] for r in sorted(best)], came, nxt)


def forms_through(st, starts, came, nxt) -> list[PathForm]:
    """The distinct :class:`PathForm` of the path through each node of ``starts``: back along ``came`` and on along
    ``nxt`` (each a node's predecessor / successor on the path, -1 at its ends), in the order of ``starts``."""
    forms, seen = [], set()
    for x in starts:
        path, y = [], int(x)
        while y >= 0:
            path.append(y)
            y = int(came[y])
        y = int(nxt[x])
        while y >= 0:
            path.append(y)
            y = int(nxt[y])
        keys, count = np.unique(np.stack([st.kind[path], st.stage[path], st.stage_b[path], st.zb[path].astype(int)]),
                                axis=1, return_counts=True)
        key = (keys.tobytes(), count.tobytes())
        if key not in seen:
            seen.add(key)
            forms.append(PathForm(keys[0], keys[1], keys[2], keys[3].astype(bool), count))
    return forms
