"""A DualPipe or DualPipeV plan's step order and its critical path in one pass over the graph, level by level (issue 39
item 1: what solver/step_order_branch.py prices each leaf by, about 4 ms at 32 ranks and 480 micro-batches, a sixth of
``step_order_s`` and ``critical_path_form`` together, 8 ms and 16 ms); and each rank's longest path the same way
(:func:`rank_paths`, what the CP-SAT cut loop adds per answer: 0.39 s by step_order_bound's ``rank_path_forms`` at 64
ranks and 512 micro-batches, which a loop past its deadline had to finish).

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
from parplan.costmodel.schedules.step_order_bound import PathForm, forms_through


@dataclass(frozen=True)
class _Levels:
    """The step order's graph by levels (a node's level: one past its predecessors' highest): the nodes in level
    order, where each level starts, per level its nodes' predecessors (inputs, then the rank's previous operation;
    padded with the index past the last node), and each node's predecessors."""
    order: np.ndarray
    bounds: list[int]
    preds: list[np.ndarray]
    of: list[tuple[int, ...]]
    succs: list[np.ndarray]  # per level its nodes' successors, ascending (padded with the index past the last node)


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
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for x in ps:
            succ[x].append(i)
    after = np.full((n, max(1, max(len(x) for x in succ))), n, np.int64)
    for i, xs in enumerate(succ):
        after[i, :len(xs)] = xs
    lv = np.asarray(level)
    order = np.argsort(lv, kind="stable")
    bounds = [0] + (np.flatnonzero(np.diff(lv[order])) + 1).tolist() + [n]
    spans = list(zip(bounds, bounds[1:]))
    return _Levels(order, bounds, [table[order[a:b]] for a, b in spans], preds, [after[order[a:b]] for a, b in spans])


def critical_path(schedule: Schedule, work: StageWork, m: int) -> tuple[float, PathForm]:
    """(``step_order_s``, ``critical_path_form``) of ``work``, level by level (the same floats and the same path:
    ties to the first predecessor; tests/solver/test_step_order_branch.py)."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    return longest_path(schedule, ranks, m, np.asarray(op_durations_s(step_structure(schedule, ranks, m), work)))


def longest_path(schedule: Schedule, ranks: int, m: int, d: np.ndarray) -> tuple[float, PathForm]:
    """The longest path of the step order's graph with operation durations ``d`` (in step_structure's order) and
    the path, compressed. The padding's end is 0: every end is at least 0 (durations are), so it changes no maximum
    and gives a node without predecessors its duration."""
    st, g = step_structure(schedule, ranks, m), _levels(schedule, ranks, m)
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


def rank_paths(schedule: Schedule, work: StageWork, m: int) -> list[PathForm]:
    """step_order_bound's ``rank_path_forms`` level by level (the same forms in the same order: per rank, the longest
    path through one of its operations, the first such operation of the rank; ties to the first predecessor and the
    first successor; tests/solver/test_step_order_critical.py)."""
    ranks = len(work.C) if schedule is Schedule.DUALPIPE else len(work.C) // 2
    st, g = step_structure(schedule, ranks, m), _levels(schedule, ranks, m)
    d = np.asarray(op_durations_s(st, work))
    n = len(d)
    end, rest = np.zeros(n + 1), np.zeros(n + 1)
    came, nxt = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    d_level = d[g.order]
    for a, b, preds in zip(g.bounds, g.bounds[1:], g.preds):
        pick = np.argmax(end[preds], axis=1)  # (the first of the latest, as max(preds, key=...))
        nodes, best = g.order[a:b], preds[np.arange(b - a), pick]
        came[nodes] = np.where(best < n, best, -1)
        end[nodes] = d_level[a:b] + end[best]
    for a, b, succs in reversed(list(zip(g.bounds, g.bounds[1:], g.succs))):
        pick = np.argmax(rest[succs], axis=1)
        nodes, best = g.order[a:b], succs[np.arange(b - a), pick]
        nxt[nodes] = np.where(best < n, best, -1)
        rest[nodes] = d_level[a:b] + rest[best]
    through = end[:n] + rest[:n] - d
    rank = np.fromiter((r for r, _ in st.node), np.int64, n)
    starts = []
    for r in range(int(rank.max()) + 1):
        mine = np.flatnonzero(rank == r)
        starts.append(int(mine[np.argmax(through[mine])]))
    return forms_through(st, starts, came, nxt)
