"""The ``per_stage`` split: every unit its own layer count, exactly, by walking the slowest-unit time τ.

A slowest-unit time τ and DP time δ admit a split iff every unit fits its least layer count and the units'
largest counts under (τ, δ) add up to the model's layers. The least such τ is the (K + n)-th smallest of all
units' times pooled (K: grid steps to hand out beyond the minima, n: units), the least δ at a τ follows by
bisection over the DP values that occur, and only the τ at which some unit's count grows can lower U further:
they are walked in order until ``M·τ`` alone reaches the best U. Where Σ_u time_u varies with the split, each
(τ, δ) also takes the least Σ under the units' count caps (:func:`least_sum`) and δ walks up at each τ through
the values at which a DP-bound unit's count grows (:func:`walk_with_sums`), passing over τ ranges whose floor
already reaches the best U (:class:`PassedTaus`). Tables too large to pool are
solved by bisection (:mod:`parplan.solver.oracle.bisection`) or, where the sum varies, by the pooled walk all
the same wherever its tables fit the memory budget (the least sum needs every unit's time at every count), else by
the CP-SAT model (:mod:`parplan.solver.oracle.fallback`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from parplan.solver.deadline import budget, check
from parplan.solver.oracle.bisection import fixed_sum, per_stage_by_bisection, sum_varies
from parplan.solver.oracle.fallback import per_stage_by_cpsat
from parplan.solver.oracle.knapsack import LEAST_SUM_NONE, free_steps, least_sum
from parplan.solver.oracle.levels import fill_levels, fill_order, least_true
from parplan.solver.oracle.recompute import INF, UnitCosts
from parplan.solver.oracle.state import TableSolve
from parplan.solver.tables import Assignment

POOLED_LIMIT = 4_000_000  # unit × layer-count entries the tables may hold; larger tables are solved by bisection
POOLED_BYTES_PER_ENTRY = 16 * 8  # the pooled walk's int64 arrays of that shape (layers, times, DP, counts, temporaries)
GALLOP_WAIT = 64  # the most τ steps the summed walk waits after a failed gallop before it tries again


def per_stage(solve: TableSolve, units: UnitCosts) -> Optional[tuple[int, Assignment]]:
    """(least U, its assignment) over every per-stage split, or None where nothing fits."""
    t = solve.t
    spare = t.num_layers - int(units.layers_min.sum())
    if spare < 0 or spare % t.grid:
        return None
    spare_steps = spare // t.grid
    pooled_bytes = t.num_units * (spare_steps + 1) * POOLED_BYTES_PER_ENTRY
    if t.num_units * (spare_steps + 1) <= POOLED_LIMIT and budget().fits(pooled_bytes):
        return pooled_walk(solve, units, spare_steps)
    if sum_varies(t, units):  # the summed walk within the memory budget, else the CP-SAT model's answer
        return pooled_walk(solve, units, spare_steps) if budget().fits(pooled_bytes) else per_stage_by_cpsat(solve, units)
    return per_stage_by_bisection(solve, units, spare_steps)


class PooledTimes:
    """Every unit's time and DP time at every step count 0..K (``times`` INF where nothing fits)."""

    def __init__(self, times: np.ndarray, dp_times: np.ndarray, dp_layer_step: np.ndarray, spare_steps: int):
        self.times, self.dp_times, self.spare_steps = times, dp_times, spare_steps
        self.num_units = times.shape[0]
        self.dp_first = dp_times[:, 0]
        self.flat_dp = bool((dp_layer_step == 0).all())
        self.has_dp_step, self.dp_step = dp_layer_step > 0, np.maximum(dp_layer_step, 1)
        self.dp_values = np.unique(dp_times)  # the least δ is one of them: the counts change only there

    def counts_at_tau(self, tau: int) -> np.ndarray:
        """Per unit, how many counts take at most ``tau``."""
        return (self.times <= tau).sum(axis=1)

    def counts_at_delta(self, delta: int) -> np.ndarray:
        """Per unit, how many counts have a DP time within ``delta`` (DP times are affine in the count)."""
        within = np.where(self.dp_first <= delta, self.spare_steps + 1, 0)
        if self.flat_dp:
            return within
        counts = np.where(self.has_dp_step, (delta - self.dp_first) // self.dp_step + 1, within)
        return np.minimum(np.maximum(counts, 0), self.spare_steps + 1)

    def least_delta(self, counts_at_tau: np.ndarray) -> int:
        """The least DP time δ at which the counts under (τ, δ) still hold every step."""
        def fits(i: int) -> bool:
            counts = np.minimum(counts_at_tau, self.counts_at_delta(int(self.dp_values[i])))
            return int((counts - 1).sum()) >= self.spare_steps and bool((counts >= 1).all())
        lo_i, hi_i = np.searchsorted(self.dp_values, [self.dp_first.max(), self.dp_times[:, -1].max()])
        return int(self.dp_values[least_true(int(lo_i), int(hi_i), fits)])

    def next_tau(self, counts_at_tau: np.ndarray) -> Optional[int]:
        """The next τ at which some unit's count grows (None: every count is at its end)."""
        times, spare = self.times, self.spare_steps
        grown = [int(times[u, counts_at_tau[u]]) for u in range(self.num_units)
                 if counts_at_tau[u] <= spare and times[u, counts_at_tau[u]] < INF]
        return min(grown) if grown else None

    def caps(self, tau: int, delta: int) -> np.ndarray:
        """Per unit, the most steps it may take under (τ, δ)."""
        return np.minimum(self.counts_at_tau(tau), self.counts_at_delta(delta)) - 1


def pooled_walk(solve: TableSolve, units: UnitCosts, spare_steps: int):
    """The τ-walk over the pooled times (module docstring): (U, assignment) or None."""
    t = solve.t
    steps = np.arange(spare_steps + 1, dtype=np.int64)
    times, dp_times, _, _ = units.at(units.layers_min[:, None] + t.grid * steps[None, :])
    times = np.maximum.accumulate(times, axis=1)  # nondecreasing by construction; enforced against rounding
    check(solve.deadline)
    if (times[:, 0] >= INF).any():
        return None
    counts_max = (times < INF).sum(axis=1)
    if int((counts_max - 1).sum()) < spare_steps:
        return None
    num_units = t.num_units
    kth = np.partition(times[times < INF], spare_steps + num_units - 1)[spare_steps + num_units - 1]
    tau = max(int(kth), int(times[:, 0].max()))
    pool = PooledTimes(times, dp_times, t.dp_layer * t.grid, spare_steps)
    delta_floor = pool.least_delta(counts_max)
    if sum_varies(t, units):
        return walk_with_sums(solve, units, pool, tau, delta_floor)
    t_sum = fixed_sum(t, times[:, 0], spare_steps) if t.S else 0
    best = None  # (U, τ, δ)
    while True:
        check(solve.deadline)
        counts_at_tau = pool.counts_at_tau(tau)
        delta = pool.least_delta(counts_at_tau)
        objective = t.objective(tau, delta, t_sum)
        if best is None or objective < best[0]:
            best = (objective, tau, delta)
        tau = pool.next_tau(counts_at_tau)
        if tau is None or solve.done(best[0], t.objective(tau, delta_floor, t_sum)):
            break
    objective, tau, delta = best
    steps = fill_levels(pool.caps(tau, delta), spare_steps, fill_order(num_units))
    return objective, solve.assign(units, units.layers_min + t.grid * steps)


def walk_with_sums(solve: TableSolve, units: UnitCosts, pool: PooledTimes, tau: int, delta_floor: int):
    """The τ-walk when U also weighs Σ_u time_u and that sum depends on the split (each unit's least
    recompute): at each (τ, δ) the caps of the units' counts are known and the least Σ under them is a
    min-plus knapsack (:func:`least_sum`). τ walks as in the plain walk; at each τ, δ walks up from its least
    value through the values at which some DP-bound unit's count grows. Both stop once the objective's
    floor (M·τ + S·least Σ + W·δ) reaches the best U: the least Σ over all caps bounds every τ, the least Σ
    at τ every δ of it."""
    t = solve.t
    free = free_steps(pool.times, int(t.t_layer[0]) * t.grid)
    sums: dict[bytes, int] = {}  # least Σ by the caps it was taken under (the walks revisit caps)

    def least(caps: np.ndarray) -> int:
        key = caps.tobytes()
        if key not in sums:
            sums[key] = least_sum(pool.times, caps, pool.spare_steps, free=free, split=False,
                                  deadline=solve.deadline)[0]
        return sums[key]

    sum_floor = least((pool.times < INF).sum(axis=1) - 1)
    best = None  # (U, τ, δ)
    passing = PassedTaus(solve, pool, least, delta_floor)
    while True:
        check(solve.deadline)
        counts_at_tau = pool.counts_at_tau(tau)
        best = _walk_delta(solve, pool, tau, counts_at_tau, least, best)
        tau = passing.first_to_visit(pool.next_tau(counts_at_tau), tau, best)
        if tau is None or (best is not None and solve.done(best[0], t.objective(tau, delta_floor, sum_floor))):
            break
    if best is None:
        return None
    objective, tau, delta = best
    _, steps = least_sum(pool.times, pool.caps(tau, delta), pool.spare_steps, units.layers_min, t.grid, free,
                         deadline=solve.deadline)
    return objective, solve.assign(units, units.layers_min + t.grid * steps)


class PassedTaus:
    """The τ ranges the summed walk may pass over: no τ in [τ₀, b] can beat the best U when the floor
    M·τ₀ + S·(least Σ under the counts at b) + W·δ_floor already reaches it (a τ ≤ b holds no more counts than b,
    so its least Σ is no smaller, and every δ is at least δ_floor). b gallops up from τ₀ by the walk's last τ
    step, doubling while the floor holds (Bentley and Yao, "An almost optimal algorithm for unbounded
    searching", IPL 5(3), 1976). A τ of equal U is passed over too: the walk keeps the first best it meets. Where
    the first b fails, the next tries wait 1, 2, 4 ... (at most :data:`GALLOP_WAIT`) τ steps."""

    def __init__(self, solve: TableSolve, pool: PooledTimes, least, delta_floor: int):
        self.solve, self.pool, self.least, self.delta_floor = solve, pool, least, delta_floor
        self.wait, self.misses = 0, 0

    def first_to_visit(self, tau: Optional[int], last_tau: int, best) -> Optional[int]:
        """The next τ the walk must visit from ``tau`` (None: none is left that can beat ``best``)."""
        if tau is None or best is None:
            return tau
        if self.wait:
            self.wait -= 1
            return tau
        span, passed = max(tau - last_tau, 1), None
        while True:
            check(self.solve.deadline)
            counts = self.pool.counts_at_tau(tau + span)
            total = self.least(counts - 1)
            if total < LEAST_SUM_NONE and self.solve.t.objective(tau, self.delta_floor, total) < best[0]:
                break
            passed, span = counts, 2 * span
            if self.pool.next_tau(counts) is None:
                return None
        if passed is None:
            self.misses = min(2 * self.misses + 1, GALLOP_WAIT)
            self.wait = self.misses
            return tau
        self.misses = 0
        return self.pool.next_tau(passed)


def _walk_delta(solve: TableSolve, pool: PooledTimes, tau: int, counts_at_tau: np.ndarray, least, best):
    """At one τ, δ from its least value up through the values at which a DP-bound unit's count grows, while
    the floor M·τ + S·(least Σ at τ) + W·δ can still beat ``best`` (U, τ, δ); returns the new best."""
    t = solve.t
    sum_at_tau = least(counts_at_tau - 1)
    delta = pool.least_delta(counts_at_tau)
    while best is None or t.objective(tau, delta, sum_at_tau) < best[0]:
        check(solve.deadline)
        counts_at_delta = pool.counts_at_delta(delta)
        total = least(np.minimum(counts_at_tau, counts_at_delta) - 1)
        if total < LEAST_SUM_NONE:
            objective = t.objective(tau, delta, total)
            if best is None or objective < best[0]:
                best = (objective, tau, delta)
        grow = [int(pool.dp_times[u, counts_at_delta[u]]) for u in range(pool.num_units)
                if counts_at_delta[u] < counts_at_tau[u]]
        if not grow or (solve.target is not None and best is not None and best[0] <= solve.target):
            break
        delta = min(grow)
    return best
