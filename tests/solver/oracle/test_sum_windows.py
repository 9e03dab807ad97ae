"""The Lagrangian windows of the least-sum knapsack (``solver/oracle/sum_windows.py``): on random tables every
least split, found by enumerating every split, lies inside them (the claim the blocked recursion's exactness
rests on), and on rows of distinct constant slopes they close to single counts."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings

from parplan.solver.oracle.recompute import INF
from parplan.solver.oracle.sum_windows import sum_windows
from tests.conftest import sized
from tests.solver.oracle.test_blocked_sum import knapsack_tables


def _least_splits(times, caps, spare_steps):
    """Every split of least sum (by enumeration) and that sum; ([], None) where none meets the caps."""
    best, splits = None, []
    for counts in itertools.product(*[range(int(c) + 1) for c in caps]):
        if sum(counts) != spare_steps or any(times[u, q] >= INF for u, q in enumerate(counts)):
            continue
        total = sum(int(times[u, q]) for u, q in enumerate(counts))
        if best is None or total < best:
            best, splits = total, [counts]
        elif total == best:
            splits.append(counts)
    return splits, best


@settings(max_examples=sized(300, 1500), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(table=knapsack_tables())
def test_every_least_split_lies_in_the_windows(table):
    times, caps, spare_steps, _, _ = table
    caps = np.minimum(caps, spare_steps)
    if (caps < 0).any() or caps.sum() < spare_steps:
        return  # least_sum answers these before any window is drawn
    splits, _ = _least_splits(times, caps, spare_steps)
    lo, hi = sum_windows(times, caps, spare_steps)
    if not splits:
        assert (lo > hi).any() or not _least_splits(times, np.minimum(caps, hi), spare_steps)[0]
    for counts in splits:
        assert ((lo <= counts) & (counts <= hi)).all(), (counts, lo, hi)


def test_windows_close_on_distinct_slopes():
    """Units costing 1, 2, 3, 4 a step, 10 steps each, 25 to hand out: the least splits fill the cheapest units
    first, (10, 10, 5, 0); the windows close to those counts but on the unit whose slope is the multiplier
    (3: any count of it is as cheap in the bound), which stays open."""
    times = (np.arange(1, 5)[:, None] * np.arange(11)[None, :]).astype(np.int64)
    lo, hi = sum_windows(times, np.full(4, 10), 25)
    assert list(zip(lo.tolist(), hi.tolist())) == [(10, 10), (10, 10), (0, 10), (0, 0)]
