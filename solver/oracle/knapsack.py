"""The least summed unit time under per-unit count caps: a min-plus knapsack over the units (exact).

``times[u, q]`` is unit u's time at q grid steps beyond its least layer count (:data:`INF` where it does not
fit); a split hands ``spare_steps`` steps out, unit u at most ``caps[u]``. Used by the summed-time walk of
:mod:`parplan.solver.oracle.per_stage` where U weighs Σ_u time_u and that sum depends on the split.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from parplan.solver.deadline import budget, check
from parplan.solver.oracle.blocked_sum import NONE, blocked_sum_split, blocked_sum_value
from parplan.solver.oracle.levels import fill_levels, fill_order
from parplan.solver.oracle.recompute import INF

LEAST_SUM_NONE = NONE  # least_sum's value where no split meets the caps
KNAPSACK_LIMIT = 30_000_000  # entries one vectorised least_sum may form; beyond, the recursion runs in blocks
KNAPSACK_BYTES_PER_ENTRY = 8 * 8  # least_sum's int64 candidate arrays per (count, step) entry and its picks


def free_steps(times: np.ndarray, slope: int) -> np.ndarray:
    """Per unit, the largest count q up to which its time grows by ``slope`` a step and no more (no recompute)."""
    steps = np.arange(times.shape[1], dtype=np.int64)
    linear = times == times[:, :1] + slope * steps[None, :]
    return np.cumprod(linear, axis=1).sum(axis=1) - 1


def least_sum(times: np.ndarray, caps: np.ndarray, spare_steps: int, layers_min: Optional[np.ndarray] = None,
              grid: int = 1, free: Optional[np.ndarray] = None, split: bool = True,
              deadline: Optional[float] = None) -> tuple[int, np.ndarray]:
    """The least Σ_u times[u, q_u] over counts q_u ∈ [0, caps[u]] with Σ_u q_u = ``spare_steps``, and one such q
    (:data:`LEAST_SUM_NONE` where no q meets the caps). Ties go to the split of least Σ_u layers_u²
    (layers_u = layers_min_u + grid·q_u: as level as the sums allow).

    ``free`` (:func:`free_steps`): where every unit's time grows by one common slope a step up to ``free[u]``
    and by at least that slope beyond, some least split gives every unit at least min(free, caps) steps
    (moving a step from a unit above it to one below it never adds time), so only the steps beyond those
    floors are searched; when the floors hold all the steps the split is the most level fill of them.
    ``split=False``: the least Σ alone (no split returned, no tie-break: the walks' bounds).

    Beyond :data:`KNAPSACK_LIMIT` candidate entries (or where they do not fit the memory budget) the same
    recursion runs in blocks of totals (:mod:`parplan.solver.oracle.blocked_sum`): the same value and split in
    bounded memory. Raises :class:`~parplan.solver.deadline.TimeUp` past ``deadline`` or the call's."""
    num_units = times.shape[0]
    caps = np.minimum(np.asarray(caps, np.int64), spare_steps)
    if (caps < 0).any() or int(caps.sum()) < spare_steps:
        return int(LEAST_SUM_NONE), np.zeros(num_units, np.int64)
    if free is not None:
        return _beyond_free(times, caps, spare_steps, layers_min, grid, free, split, deadline)
    base = np.zeros(num_units, np.int64) if layers_min is None else np.asarray(layers_min, np.int64)
    if num_units * (spare_steps + 1) * (int(caps.max()) + 1) > KNAPSACK_LIMIT or not budget().fits(
            KNAPSACK_BYTES_PER_ENTRY * (spare_steps + 1) * (int(caps.max()) + 1 + num_units)):
        if not split:
            return blocked_sum_value(times, caps, spare_steps, deadline), np.zeros(num_units, np.int64)
        return blocked_sum_split(times, caps, spare_steps, base, grid, deadline)
    if not split:
        return least_sum_value(times, caps, spare_steps, deadline), np.zeros(num_units, np.int64)
    return _least_sum_split(times, caps, spare_steps, base, grid, deadline)


def _beyond_free(times, caps, spare_steps, layers_min, grid, free, split, deadline) -> tuple[int, np.ndarray]:
    """:func:`least_sum` over the steps beyond each unit's free floor (its docstring)."""
    num_units = times.shape[0]
    floor = np.minimum(np.asarray(free, np.int64), caps)
    rest = spare_steps - int(floor.sum())
    if rest <= 0:
        steps = fill_levels(floor, spare_steps, fill_order(num_units))
        return int(times[np.arange(num_units), steps].sum()), steps
    rows = np.arange(num_units)[:, None]
    width = int((caps - floor).max()) + 1
    cols = np.minimum(floor[:, None] + np.arange(width)[None, :], times.shape[1] - 1)
    shifted = np.where(np.arange(width)[None, :] <= (caps - floor)[:, None], times[rows, cols], INF)
    base = np.zeros(num_units, np.int64) if layers_min is None else np.asarray(layers_min, np.int64)
    total, extra = least_sum(shifted, caps - floor, rest, base + grid * floor, grid, split=split, deadline=deadline)
    return total, floor + extra


def _least_sum_split(times, caps, spare_steps, base, grid, deadline) -> tuple[int, np.ndarray]:
    """:func:`least_sum` with its split: the min-plus recursion unit by unit, keeping each step's pick, ties to
    the least Σ layers²."""
    none = LEAST_SUM_NONE
    num_units = times.shape[0]
    values = np.where(times[:, :spare_steps + 1] >= INF, none, times[:, :spare_steps + 1])
    totals_at = np.arange(spare_steps + 1)
    best = np.full(spare_steps + 1, none, np.int64)
    best[:caps[0] + 1] = values[0, :caps[0] + 1]
    squares = np.full(spare_steps + 1, none, np.int64)
    squares[:caps[0] + 1] = (base[0] + grid * totals_at[:caps[0] + 1]) ** 2
    picks = []
    for unit in range(1, num_units):
        check(deadline)
        own = np.arange(caps[unit] + 1)
        before = totals_at[:, None] - own[None, :]
        valid = before >= 0
        at = np.maximum(before, 0)
        cand = np.where(valid, np.minimum(best[at] + values[unit, own][None, :], none), none)
        cand_squares = np.where(valid, squares[at] + ((base[unit] + grid * own) ** 2)[None, :], none)
        least = cand.min(axis=1)
        pick = np.where(cand == least[:, None], cand_squares, np.iinfo(np.int64).max).argmin(axis=1)
        best, squares = least, np.where(least < none, cand_squares[totals_at, pick], none)
        picks.append(pick)
    if best[spare_steps] >= none:
        return int(none), np.zeros(num_units, np.int64)
    steps = np.zeros(num_units, np.int64)
    rest = spare_steps
    for unit in range(num_units - 1, 0, -1):
        steps[unit] = picks[unit - 1][rest]
        rest -= int(steps[unit])
    steps[0] = rest
    return int(best[spare_steps]), steps


def least_sum_value(times: np.ndarray, caps: np.ndarray, spare_steps: int, deadline: Optional[float] = None) -> int:
    """:func:`least_sum`'s value alone: the min-plus convolution of the units' capped rows, five array operations
    a unit."""
    none = LEAST_SUM_NONE
    num_units, width = times.shape[0], int(caps.max()) + 1
    cols = np.arange(width)
    values = np.full((num_units, width), none, np.int64)
    have = min(width, times.shape[1])
    values[:, :have] = np.where(times[:, :have] >= INF, none, times[:, :have])
    rows = np.where(cols[None, :] <= caps[:, None], values, none)
    idx = (width - 1) + np.arange(spare_steps + 1)[:, None] - cols[None, :]  # best[j - q], the pad where q > j
    pad = np.full(width - 1, none, np.int64)
    best = np.full(spare_steps + 1, none, np.int64)
    best[:min(width, spare_steps + 1)] = rows[0, :min(width, spare_steps + 1)]
    for unit in range(1, num_units):
        check(deadline)
        best = np.minimum((np.concatenate((pad, best))[idx] + rows[unit][None, :]).min(axis=1), none)
    return int(best[spare_steps])
