"""Handing grid steps out to units: the least-true bisection and the most level fill (the oracle's splits)."""

from __future__ import annotations

import numpy as np


def least_true(lo: int, hi: int, ok) -> int:
    """The least integer in [lo, hi] for which the monotone predicate ``ok`` holds (``ok(hi)`` is assumed)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def fill_order(num_units: int) -> list[int]:
    """Units in the order extra layers go to them: middle first (the ends carry embedding and head)."""
    return sorted(range(num_units), key=lambda unit: (abs(unit - (num_units - 1) / 2), unit))


def fill_levels(caps: np.ndarray, spare_steps: int, order: list[int]) -> np.ndarray:
    """Hand out ``spare_steps`` grid steps, each unit at most caps[u]: as level as possible, remainders in
    ``order``."""
    caps = np.maximum(caps, 0)
    level = least_true(0, int(caps.max()) if len(caps) else 0,
                       lambda level: int(np.minimum(caps, level).sum()) >= spare_steps)
    steps = np.minimum(caps, max(level - 1, 0))
    rest = spare_steps - int(steps.sum())
    for unit in order:
        if rest <= 0:
            break
        if caps[unit] > steps[unit]:
            steps[unit] += 1
            rest -= 1
    assert rest == 0, (caps, spare_steps)
    return steps
