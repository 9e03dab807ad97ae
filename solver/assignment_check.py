"""An assignment read against its table: each unit's time, memory and DP time (:func:`unit_values`), the objective
and the peak memory both searches report (:func:`evaluate_assignment`), and every structural rule of the table it
breaks (:func:`assignment_violations`): the one reference the CP-SAT model, the oracle and the tests check their
answers by. The table and its objective: :mod:`parplan.solver.tables`; a DualPipe rank's split between its two
stages, its exposure and its recompute working sets: :mod:`parplan.solver.paired_split`.
"""

from __future__ import annotations

import numpy as np

from parplan.solver.paired_split import pair_split_violations, recomputing_stages, split_exposure
from parplan.solver.tables import Assignment, StageTable, uniform_recompute_of


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
