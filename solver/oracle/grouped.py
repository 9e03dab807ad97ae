"""The grouped splits: ``first_last`` (the middle units share one layer and one recompute count, every (first,
middle) pair is enumerated) and ``even`` (the split is fixed; each unit takes its least recompute)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from parplan.solver.assignment_check import evaluate_assignment
from parplan.solver.deadline import check
from parplan.solver.oracle.per_stage import per_stage
from parplan.solver.oracle.recompute import INF, UnitCosts
from parplan.solver.oracle.state import TableSolve
from parplan.solver.tables import HEADROOM, Assignment, scaled_objective


def grouped(solve: TableSolve, units: UnitCosts) -> Optional[tuple[int, Assignment]]:
    """(least U, its assignment) of a first_last or even table, or None where nothing fits."""
    t = solve.t
    if t.layers_fixed is not None:
        layers = t.layers_fixed
        # a trimmed end unit keeps its least count's residue modulo the grid (table_builder._layers_min)
        if ((layers < units.layers_min).any() or int(layers.sum()) != t.num_layers
                or ((layers - units.layers_min) % t.grid).any()):
            return None
        x = solve.assign(units, layers)
        if x is None:
            return None
        return evaluate_assignment(t, x)[0], x
    if t.num_units <= (1 if t.one_end else 2):
        return per_stage(solve, units)
    return _first_last(solve, units)


def _first_last(solve: TableSolve, units: UnitCosts) -> Optional[tuple[int, Assignment]]:
    """Every middle step count, and at each the best split of the rest between the ends (ties: the most even
    ends, then the fewest first-unit steps)."""
    t = solve.t
    num_units, grid = t.num_units, t.grid
    mid = list(range(1, num_units - 1)) if not t.one_end else list(range(1, num_units))
    ends = [0, num_units - 1] if not t.one_end else [0]
    layers_min = units.layers_min
    mid_layers_min = int(layers_min[mid].max())
    spare = t.num_layers - int(layers_min[ends].sum()) - len(mid) * mid_layers_min
    if spare < 0 or spare % grid:
        return None
    spare_steps = spare // grid
    steps = np.arange(spare_steps + 1, dtype=np.int64)
    mid_layers = mid_layers_min + grid * steps[: spare_steps // len(mid) + 1]
    end_times, end_dp, _, _ = _at_rows(units, ends, layers_min[ends][:, None] + grid * steps[None, :])
    mid_time, mid_dp, mid_time_sum = _group(units, mid, mid_layers)
    check(solve.deadline)
    best = None  # (U, layers)
    for mid_step in range(len(mid_layers)):
        if mid_time[mid_step] >= INF:
            break
        rest = spare_steps - len(mid) * mid_step
        if rest < 0:
            break
        first_steps = np.array([rest]) if len(ends) == 1 else np.arange(0, rest + 1)
        last_steps = None if len(ends) == 1 else rest - first_steps
        t_max, dp_max = np.maximum(end_times[0, first_steps], mid_time[mid_step]), end_dp[0, first_steps]
        t_sum = end_times[0, first_steps] + mid_time_sum[mid_step]
        if last_steps is not None:
            t_max, dp_max = np.maximum(t_max, end_times[1, last_steps]), np.maximum(dp_max, end_dp[1, last_steps])
            t_sum = t_sum + end_times[1, last_steps]
        dp_max = np.maximum(dp_max, mid_dp[mid_step])
        pick = _best_ends(t, t_max, t_sum, dp_max, first_steps, last_steps)
        if pick is not None and (best is None or pick[0] < best[0]):
            layers = np.zeros(num_units, np.int64)
            layers[mid] = mid_layers[mid_step]
            layers[ends[0]] = layers_min[ends[0]] + grid * int(first_steps[pick[1]])
            if last_steps is not None:
                layers[ends[1]] = layers_min[ends[1]] + grid * int(last_steps[pick[1]])
            best = (pick[0], layers)
    if best is None:
        return None
    x = solve.assign(units, best[1])
    return (evaluate_assignment(t, x)[0], x) if x is not None else None


def _best_ends(t, t_max, t_sum, dp_max, first_steps, last_steps) -> Optional[tuple[int, int]]:
    """(U, index) of the best split of the ends at one middle count; None where none fits. Vectorised unless
    the objective could leave int64."""
    fits = np.nonzero(t_max < INF)[0]
    if not len(fits):
        return None
    t_sum = t_sum[fits]
    if t.objective(t_max[fits].max(), dp_max[fits].max(), t_sum.max()) < HEADROOM:
        objectives = scaled_objective(t, t_max[fits], t_sum, dp_max[fits])
        candidates = list(zip(objectives.tolist(), fits.tolist()))
    else:
        candidates = [(t.objective(t_max[i], dp_max[i], total), int(i)) for i, total in zip(fits, t_sum)]

    def unevenness(i: int) -> int:
        return abs(int(first_steps[i]) - (int(last_steps[i]) if last_steps is not None else 0))
    return min(candidates, key=lambda c: (c[0], unevenness(c[1]), c[1]))


def _at_rows(units: UnitCosts, rows: list[int], layers: np.ndarray):
    """(time, dp, dense, moe) of ``rows`` at each column of ``layers``, the other units at their least."""
    full = np.zeros((units.t.num_units, layers.shape[1]), np.int64)
    full[:] = units.layers_min[:, None]
    full[rows] = layers
    times, dp_times, dense, moe = units.at(full)
    return times[rows], dp_times[rows], dense[rows], moe[rows]


def _group(units: UnitCosts, rows: list[int], layers: np.ndarray):
    """Slowest time, DP time and summed time of a group sharing layer count ``layers`` and one recompute count
    (the largest any needs); the sum is only meaningful where the slowest time is finite."""
    t = units.t
    times, dp_times, _, moe = _at_rows(units, rows, np.broadcast_to(layers[None, :], (len(rows), len(layers))))
    if units.fixed_recompute:
        ok = (times < INF).all(axis=0)
        return times.max(axis=0), dp_times.max(axis=0), np.where(ok, np.where(ok, times, 0).sum(axis=0), 0)
    shared = moe.max(axis=0)
    ok = (times < INF).all(axis=0) & (shared <= layers)
    unit_times = (t.t_layer[rows][:, None] * layers[None, :] + t.t_const[rows][:, None]
                  + t.pair_time(np.broadcast_to(layers[None, :], (t.num_units, len(layers))))[rows]
                  + t.t_recompute[rows][:, None] * np.minimum(shared, layers)[None, :])
    return np.where(ok, unit_times.max(axis=0), INF), dp_times.max(axis=0), np.where(ok, unit_times.sum(axis=0), 0)
