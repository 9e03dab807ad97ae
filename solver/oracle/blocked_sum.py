"""The min-plus knapsack of :func:`parplan.solver.oracle.knapsack.least_sum` in bounded memory: the same
recursion unit by unit, each unit's candidates formed for one block of totals at a time.

``least_sum``'s vectorised recursion forms every (total, own count) candidate of a unit at once, (K + 1)·(cap + 1)
entries: at 10^6 layers under memory pressure that is terabytes. Here a unit's candidates for totals
``j0 .. j1 - 1`` are formed together, at most :data:`BLOCK_ENTRIES` of them, and the recursion keeps only the
running least sums (and, for the split, each unit's pick per total: 4 bytes a (unit, total), 1/32 of the pooled
tables the walk already holds). Each total's row is the vectorised recursion's row, so the values, the picks and
with them the tie rule are the same: the least Σ, then the least Σ_u layers_u², then, unit by unit from the last,
the fewest steps (the first least candidate). The time is unchanged, n·(K + 1)·(cap + 1) candidate
entries: each block checks the deadline and cancel event (:func:`parplan.solver.deadline.check`), and the
picks are claimed against the memory budget before they are built.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from parplan.solver.deadline import budget, check
from parplan.solver.oracle.recompute import INF

NONE = np.int64(1) << np.int64(60)  # a total no counts reach (knapsack.LEAST_SUM_NONE)
BLOCK_ENTRIES = 1 << 18  # candidates formed at once: about 6 int64 arrays of this size, 12 MiB
PICK_BYTES = 4  # one unit's own count at one total (int32)


def block_totals(width: int, block_entries: int) -> int:
    """How many totals one block holds when each has ``width`` candidates (at least one)."""
    return max(1, block_entries // max(width, 1))


class BlockedSum:
    """The running least sums of units 0..u at every total 0..K (and their Σ layers²), extended one unit at a
    time in blocks of totals."""

    def __init__(self, times: np.ndarray, caps: np.ndarray, spare_steps: int, layers_min: Optional[np.ndarray],
                 grid: int, deadline: Optional[float], block_entries: Optional[int]):
        """``layers_min``: each unit's layers at 0 steps, for the tie-break on Σ layers² (None: the value alone)."""
        self.caps, self.spare_steps, self.layers_min, self.grid = caps, spare_steps, layers_min, grid
        self.deadline, self.block_entries = deadline, block_entries or BLOCK_ENTRIES
        self.values = np.where(times[:, :spare_steps + 1] >= INF, NONE, times[:, :spare_steps + 1])
        self.best = np.full(spare_steps + 1, NONE, np.int64)
        self.best[:caps[0] + 1] = self.values[0, :caps[0] + 1]
        self.squares = None
        if layers_min is not None:
            self.squares = np.full(spare_steps + 1, NONE, np.int64)
            self.squares[:caps[0] + 1] = self.own_squares(0, int(caps[0]) + 1)

    def own_squares(self, unit: int, width: int) -> np.ndarray:
        """Unit ``unit``'s layers² at 0..width-1 steps."""
        return (int(self.layers_min[unit]) + self.grid * np.arange(width, dtype=np.int64)) ** 2

    def add_unit(self, unit: int, picks: Optional[np.ndarray]) -> None:
        """Extend the running sums by ``unit``; its pick per total goes to ``picks`` (when splitting)."""
        width = int(self.caps[unit]) + 1
        step = block_totals(width, self.block_entries)
        best = np.empty_like(self.best)
        squares = None if self.squares is None else np.empty_like(self.squares)
        own_squares = None if self.squares is None else self.own_squares(unit, width)
        for j0 in range(0, self.spare_steps + 1, step):
            check(self.deadline)
            j1 = min(j0 + step, self.spare_steps + 1)
            self._block(unit, width, j0, j1, (best, squares, picks), own_squares)
        self.best, self.squares = best, squares

    def _block(self, unit, width, j0, j1, out, own_squares) -> None:
        """Totals j0..j1-1 of :meth:`add_unit`: the vectorised recursion's rows (knapsack._least_sum_split)."""
        own = np.arange(width)
        totals = np.arange(j0, j1)
        before = totals[:, None] - own[None, :]
        valid = before >= 0
        at = np.maximum(before, 0)
        cand = np.where(valid, np.minimum(self.best[at] + self.values[unit, own][None, :], NONE), NONE)
        least = cand.min(axis=1)
        best, squares, picks = out
        best[j0:j1] = least
        if squares is None:
            return
        cand_squares = np.where(valid, self.squares[at] + own_squares[None, :], NONE)
        pick = np.where(cand == least[:, None], cand_squares, np.iinfo(np.int64).max).argmin(axis=1)
        squares[j0:j1] = np.where(least < NONE, cand_squares[np.arange(j1 - j0), pick], NONE)
        picks[j0:j1] = pick


def blocked_sum_value(times: np.ndarray, caps: np.ndarray, spare_steps: int, deadline: Optional[float] = None,
                      block_entries: Optional[int] = None) -> int:
    """The least Σ_u times[u, q_u] over q_u ∈ [0, caps[u]] with Σ_u q_u = ``spare_steps`` (caps already at most
    ``spare_steps``, their sum at least it); :data:`NONE` where no counts reach it."""
    run = BlockedSum(times, caps, spare_steps, None, 1, deadline, block_entries)
    for unit in range(1, times.shape[0]):
        run.add_unit(unit, None)
    return int(min(run.best[spare_steps], NONE))


def blocked_sum_split(times: np.ndarray, caps: np.ndarray, spare_steps: int, layers_min: np.ndarray, grid: int,
                      deadline: Optional[float] = None,
                      block_entries: Optional[int] = None) -> tuple[int, np.ndarray]:
    """:func:`blocked_sum_value` and one least split, ties to the least Σ_u layers_u² (layers_u = layers_min_u +
    grid·q_u), then unit by unit from the last the fewest steps; (NONE, zeros) where no counts reach it."""
    num_units = times.shape[0]
    budget().require(PICK_BYTES * max(num_units - 1, 0) * (spare_steps + 1), "the least-sum split's picks")
    run = BlockedSum(times, caps, spare_steps, np.asarray(layers_min, np.int64), grid, deadline, block_entries)
    picks = np.zeros((max(num_units - 1, 0), spare_steps + 1), np.int32)
    for unit in range(1, num_units):
        run.add_unit(unit, picks[unit - 1])
    if run.best[spare_steps] >= NONE:
        return int(NONE), np.zeros(num_units, np.int64)
    steps = np.zeros(num_units, np.int64)
    rest = spare_steps
    for unit in range(num_units - 1, 0, -1):
        steps[unit] = picks[unit - 1][rest]
        rest -= int(steps[unit])
    steps[0] = rest
    return int(run.best[spare_steps]), steps
