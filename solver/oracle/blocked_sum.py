"""The min-plus knapsack of :func:`parplan.solver.oracle.knapsack.least_sum` in bounded memory: the same
recursion unit by unit, over the counts its Lagrangian windows leave open, in blocks of totals.

``least_sum``'s vectorised recursion forms every (total, own count) candidate of a unit at once, (K + 1)·(cap + 1)
entries: at 10^6 layers under memory pressure that is terabytes, and as many operations. Here each unit's own
counts are those of its window (:mod:`parplan.solver.oracle.sum_windows`: every least split lies inside), the
totals after unit u those that the windows of units 0..u reach and those of units u+1.. can still complete to
K, and a unit's candidates are formed for a block of totals at a time, at most :data:`BLOCK_ENTRIES` of them.
The recursion keeps only the running least sums over those totals and, for the split, each unit's pick per
total (4 bytes a (unit, total), claimed against the memory budget). Every least split lies in the windows, so
the same candidates reach the least value, and the tie rule is the vectorised one: the least Σ, then the least
Σ_u layers_u², then unit by unit from the last the fewest steps (the first least candidate). Each block checks
the deadline and cancel event (:func:`parplan.solver.deadline.check`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from parplan.solver.deadline import budget, check
from parplan.solver.oracle.recompute import INF
from parplan.solver.oracle.sum_windows import sum_windows

NONE = np.int64(1) << np.int64(60)  # a total no counts reach (knapsack.LEAST_SUM_NONE)
BLOCK_ENTRIES = 1 << 18  # candidates formed at once: about 6 int64 arrays of this size, 12 MiB
PICK_BYTES = 4  # one unit's own count at one total (int32)


def block_totals(width: int, block_entries: int) -> int:
    """How many totals one block holds when each has ``width`` candidates (at least one)."""
    return max(1, block_entries // max(width, 1))


class BlockedSum:
    """The running least sums of units 0..u (and their Σ layers²) over the totals still open after unit u,
    extended one unit at a time in blocks of totals."""

    def __init__(self, times: np.ndarray, caps: np.ndarray, spare_steps: int, layers_min: Optional[np.ndarray],
                 grid: int, deadline: Optional[float], block_entries: Optional[int]):
        """``layers_min``: each unit's layers at 0 steps, for the tie-break on Σ layers² (None: the value alone)."""
        self.times, self.layers_min, self.grid = times, layers_min, grid
        self.deadline, self.block_entries = deadline, block_entries or BLOCK_ENTRIES
        windows = sum_windows(times, caps, spare_steps, deadline)
        self.lo, self.hi = windows if windows is not None else (np.zeros_like(caps), np.asarray(caps, np.int64))
        reach_lo, reach_hi = np.cumsum(self.lo), np.cumsum(self.hi)
        left_lo, left_hi = int(reach_lo[-1]) - reach_lo, int(reach_hi[-1]) - reach_hi  # units after u
        self.totals_lo = np.maximum(reach_lo, spare_steps - left_hi)
        self.totals_hi = np.minimum(reach_hi, spare_steps - left_lo)
        self.open = bool((self.lo <= self.hi).all() and (self.totals_lo <= self.totals_hi).all())
        self.start = int(self.totals_lo[0])
        own = np.arange(self.start, int(self.totals_hi[0]) + 1) if self.open else np.arange(0)
        self.best = self.own_values(0, own)
        self.squares = None if layers_min is None else self.own_squares(0, own)

    def own_values(self, unit: int, own: np.ndarray) -> np.ndarray:
        """Unit ``unit``'s times at counts ``own`` (NONE where it does not fit)."""
        times = self.times[unit, own]
        return np.where(times >= INF, NONE, times)

    def own_squares(self, unit: int, own: np.ndarray) -> np.ndarray:
        """Unit ``unit``'s layers² at counts ``own``."""
        return (int(self.layers_min[unit]) + self.grid * own.astype(np.int64)) ** 2

    def add_unit(self, unit: int, picks: Optional[np.ndarray]) -> None:
        """Extend the running sums by ``unit``; its count per total goes to ``picks`` (when splitting)."""
        own = np.arange(int(self.lo[unit]), int(self.hi[unit]) + 1)
        own_values = self.own_values(unit, own)
        own_squares = None if self.squares is None else self.own_squares(unit, own)
        first, last = int(self.totals_lo[unit]), int(self.totals_hi[unit])
        best = np.empty(last - first + 1, np.int64)
        squares = None if self.squares is None else np.empty_like(best)
        step = block_totals(len(own), self.block_entries)
        for j0 in range(first, last + 1, step):
            check(self.deadline)
            totals = np.arange(j0, min(j0 + step, last + 1))
            self._block(totals, own, own_values, own_squares, (best, squares, picks), j0 - first)
        self.best, self.squares, self.start = best, squares, first

    def _block(self, totals, own, own_values, own_squares, out, at_out) -> None:
        """One block of :meth:`add_unit`'s totals: the vectorised recursion's rows (knapsack._least_sum_split)."""
        before = totals[:, None] - own[None, :] - self.start
        valid = (before >= 0) & (before < len(self.best))
        at = np.clip(before, 0, len(self.best) - 1)
        cand = np.where(valid, np.minimum(self.best[at] + own_values[None, :], NONE), NONE)
        least = cand.min(axis=1)
        best, squares, picks = out
        rows = slice(at_out, at_out + len(totals))
        best[rows] = least
        if squares is None:
            return
        cand_squares = np.where(valid, self.squares[at] + own_squares[None, :], NONE)
        pick = np.where(cand == least[:, None], cand_squares, np.iinfo(np.int64).max).argmin(axis=1)
        squares[rows] = np.where(least < NONE, cand_squares[np.arange(len(totals)), pick], NONE)
        picks[rows] = own[pick]

    def least(self) -> int:
        """The least sum at the last total (every unit added), NONE where none."""
        return int(min(self.best[-1], NONE)) if self.open else int(NONE)


def blocked_sum_value(times: np.ndarray, caps: np.ndarray, spare_steps: int, deadline: Optional[float] = None,
                      block_entries: Optional[int] = None) -> int:
    """The least Σ_u times[u, q_u] over q_u ∈ [0, caps[u]] with Σ_u q_u = ``spare_steps`` (caps already at most
    ``spare_steps``, their sum at least it); :data:`NONE` where no counts reach it."""
    run = BlockedSum(times, caps, spare_steps, None, 1, deadline, block_entries)
    for unit in range(1, times.shape[0] if run.open else 1):
        run.add_unit(unit, None)
    return run.least()


def blocked_sum_split(times: np.ndarray, caps: np.ndarray, spare_steps: int, layers_min: np.ndarray, grid: int,
                      deadline: Optional[float] = None,
                      block_entries: Optional[int] = None) -> tuple[int, np.ndarray]:
    """:func:`blocked_sum_value` and one least split, ties to the least Σ_u layers_u² (layers_u = layers_min_u +
    grid·q_u), then unit by unit from the last the fewest steps; (NONE, zeros) where no counts reach it."""
    num_units = times.shape[0]
    run = BlockedSum(times, caps, spare_steps, np.asarray(layers_min, np.int64), grid, deadline, block_entries)
    if not run.open:
        return int(NONE), np.zeros(num_units, np.int64)
    widths = run.totals_hi[1:] - run.totals_lo[1:] + 1
    budget().require(PICK_BYTES * int(widths.sum()), "the least-sum split's picks")
    picks = [np.zeros(int(width), np.int32) for width in widths]
    for unit in range(1, num_units):
        run.add_unit(unit, picks[unit - 1])
    if run.least() >= NONE:
        return int(NONE), np.zeros(num_units, np.int64)
    steps = np.zeros(num_units, np.int64)
    rest = spare_steps
    for unit in range(num_units - 1, 0, -1):
        steps[unit] = picks[unit - 1][rest - int(run.totals_lo[unit])]
        rest -= int(steps[unit])
    steps[0] = rest
    return run.least(), steps
