"""A DualPipe or DualPipeV plan's step order and its critical path in one pass over the graph, level by level (issue 39
item 1: what solver/step_order_branch.py prices each leaf by, about 4 ms at 32 ranks and 480 micro-batches, a sixth of
``step_order_s`` and ``critical_path_form`` together, 8 ms and 16 ms).

The graph (costmodel/schedules/dualpipe_steps.py ``step_structure``) is a DAG whose nodes are in a topological order;
a node's level is one past its predecessors' highest, so every node of a level reads only ends already computed: one
array operation per level (558 levels for 17,378 operations at 32 ranks and 480 micro-batches) instead of one Python
step per operation. The same floats as ``step_order_s`` (each end is its duration plus its predecessors' largest end)
and the same path as ``critical_path_form`` (ties to the first predecessor: inputs, then the rank's previous
operation), tests/solver/test_step_order_branch.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from parplan.costmodel.schedules.dualpipe_steps import StageWork, op_durations_s, step_structure
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.schedules.step_order_bound import PathForm


@dataclass(frozen=True)
class _Levels:
    """The step order's graph by levels (a node's level: one past its predecessors' highest): the nodes in level
    order, where each level starts, per level its nodes' predecessors (inputs, then the rank's previous operation;
    padded with the index past the last node), and each node's predecessors."""
    order: np.ndarray
    bounds: list[int]
    preds: list[np.ndarray]
    of: list[tuple[int, ...]]


@functools.lru_cache(maxsize=8)
def _levels(schedule: Schedule, ranks: int, m: int) -> _Levels:
    st = step_structure(schedule, ranks, m)
    n = len(st.prev)
    preds = [tuple(ins) + ((prev,) if prev >= 0 else ()) for ins, prev in zip(st.inputs, st.prev)]
    level = [0] * n
    for i, ps in enumerate(preds):
        level[i] = 1 + max((level[x] for x in ps), default=-1)
    table = np.full((n, max(1, max(len(ps) for ps in preds))), n, np.int64)
    for i, ps in enumerate(preds):
        table[i, :len(ps)] = ps
    lv = np.asarray(level)
    order = np.argsort(lv, kind="stable")
    bounds = [0] + (np.flatnonzero(np.diff(lv[order])) + 1).tolist() + [n]
    return _Levels(order, bounds, [table[order[a:b]] for a, b in zip(bounds, bounds[1:])], preds)


def critical_path(schedule: Schedule, work: StageWork, m: int) -> tuple[float, PathForm]:
    """(``step_order_s``, ``critical_path_form``) of ``work``, level by level (the same floats and the same path:
    ties to the first predecessor; tests/solver/test_step_order_branch.py). The padding's end is 0: every end is at
    least 0 (durations are), so it changes no maximum and gives a node without predecessors its duration."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    st, g = step_structure(schedule, ranks, m), _levels(schedule, ranks, m)
    d = np.asarray(op_durations_s(st, work))
    n = len(d)
    end = np.zeros(n + 1)
    d_level = d[g.order]
    for a, b, preds in zip(g.bounds, g.bounds[1:], g.preds):
        end[g.order[a:b]] = d_level[a:b] + end[preds].max(axis=1)
    top = last = int(np.argmax(end[:n]))
    path = []
    while last >= 0:
        path.append(last)
        ps = g.of[last]
        last = max(ps, key=end.__getitem__) if ps else -1  # (the first of the latest)
    keys, count = np.unique(np.stack([st.kind[path], st.stage[path], st.stage_b[path], st.zb[path].astype(int)]),
                            axis=1, return_counts=True)
    return float(end[top]), PathForm(keys[0], keys[1], keys[2], keys[3].astype(bool), count)
