"""The ``per_stage`` split of tables too large to pool: the same answer as the pooled τ-walk, with each unit's
count under (τ, δ) found by bisection on its layer count (only where Σ_u time_u does not vary with the split;
:func:`sum_varies`)."""

from __future__ import annotations

import numpy as np

from parplan.solver.deadline import check
from parplan.solver.oracle.levels import fill_levels, fill_order, least_true
from parplan.solver.oracle.recompute import INF, UnitCosts
from parplan.solver.oracle.state import TableSolve
from parplan.solver.tables import StageTable

UNBOUNDED = int(INF) - 1  # a τ or δ limit that never binds


def sum_varies(t: StageTable, units: UnitCosts) -> bool:
    """Whether Σ_u time_u depends on the split: only through each unit's least recompute, and only when the
    objective weighs it (S > 0). Per-layer times are the same on every unit (table_builder.build_table), so with
    the recompute fixed Σ_u time_u is one constant over every split."""
    return bool(t.S) and (not units.fixed_recompute or t.t_pair is not None)


class CountBisection:
    """Per-unit step counts under a (τ, δ) limit, each by bisection on the unit's own count."""

    def __init__(self, solve: TableSolve, units: UnitCosts, spare_steps: int):
        self.solve, self.units, self.spare_steps = solve, units, spare_steps
        self.num_units = solve.t.num_units

    def time_dp(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        times, dp_times, _, _ = self.units.at(self.units.layers_min + self.solve.t.grid * steps)
        return times, dp_times

    def counts(self, tau: int, delta: int) -> np.ndarray:
        """Per unit, how many counts take at most τ with a DP time at most δ."""
        lo_q = np.full(self.num_units, -1, np.int64)
        hi_q = np.full(self.num_units, self.spare_steps, np.int64)
        while (lo_q < hi_q).any():
            check(self.solve.deadline)
            mid = (lo_q + hi_q + 1) // 2
            times, dp_times = self.time_dp(np.maximum(mid, 0))
            ok = (times <= tau) & (dp_times <= delta)
            lo_q = np.where(lo_q < hi_q, np.where(ok, mid, lo_q), lo_q)
            hi_q = np.where(lo_q < hi_q, np.where(ok, hi_q, mid - 1), hi_q)
        return lo_q + 1

    def feasible(self, tau: int, delta: int) -> bool:
        counts = self.counts(tau, delta)
        return bool((counts >= 1).all() and int((counts - 1).sum()) >= self.spare_steps)


def per_stage_by_bisection(solve: TableSolve, units: UnitCosts, spare_steps: int):
    """(U, assignment) or None: the pooled walk's τ sequence, each count found by bisection."""
    t = solve.t
    search = CountBisection(solve, units, spare_steps)
    first_times, first_dp = search.time_dp(np.zeros(t.num_units, np.int64))
    if (first_times >= INF).any():
        return None
    _, last_dp = search.time_dp(np.full(t.num_units, spare_steps, np.int64))
    if not search.feasible(UNBOUNDED, UNBOUNDED):
        return None
    delta_top = int(last_dp.max())

    def least_tau(delta: int) -> int:
        tau_top = int(search.time_dp(np.maximum(search.counts(UNBOUNDED, delta) - 1, 0))[0].max())
        return least_true(int(first_times.max()), tau_top, lambda tau: search.feasible(tau, delta))

    def least_delta(tau: int) -> int:
        return least_true(int(first_dp.max()), delta_top, lambda delta: search.feasible(tau, delta))

    tau = least_tau(delta_top)
    delta_floor = least_delta(UNBOUNDED)
    delta = least_delta(tau)
    t_sum = fixed_sum(t, first_times, spare_steps) if t.S else 0  # per_stage sends varying sums elsewhere
    best = (t.objective(tau, delta, t_sum), tau, delta)
    while True:
        counts = search.counts(tau, UNBOUNDED)
        times, _ = search.time_dp(np.minimum(counts, spare_steps))
        grown = [int(times[u]) for u in range(t.num_units) if counts[u] <= spare_steps and times[u] < INF]
        if not grown:
            break
        tau = min(grown)
        if solve.done(best[0], t.objective(tau, delta_floor, t_sum)):
            break
        delta = least_delta(tau)
        objective = t.objective(tau, delta, t_sum)
        if objective < best[0]:
            best = (objective, tau, delta)
    objective, tau, delta = best
    steps = fill_levels(search.counts(tau, delta) - 1, spare_steps, fill_order(t.num_units))
    return objective, solve.assign(units, units.layers_min + t.grid * steps)


def fixed_sum(t: StageTable, first_times: np.ndarray, spare_steps: int) -> int:
    """Σ_u time_u of every split when it does not vary: the least counts' times plus K grid steps of layers."""
    return int(first_times.sum()) + int(t.t_layer[0]) * t.grid * spare_steps
