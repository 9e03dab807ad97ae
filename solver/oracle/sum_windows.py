"""Windows on each unit's count that every least split of the min-plus knapsack lies in, from its Lagrangian
bound (weak duality; Fisher, "The Lagrangian relaxation method for solving integer programming problems",
Management Science 27(1), 1981, §2).

For the least Σ_u f_u(q_u) over q_u ∈ [0, caps_u] with Σ_u q_u = K, and any multiplier λ,
``LB(λ) = λ·K + Σ_u m_u`` with ``m_u = min_q (f_u(q) - λ·q)`` is a lower bound, and every split q of sum at most an
upper bound UB has ``Σ_u e_u(q_u) ≤ UB - LB`` where ``e_u(q) = f_u(q) - λ·q - m_u ≥ 0``; so each of its counts
has ``e_u(q_u) ≤ UB - LB``. λ is the least integer at which the units' largest minimisers reach K (the bound's
maximiser up to rounding); UB is a split between the largest minimisers at λ - 1 and at λ. On the tables of
the summed-time walk (each unit's time linear in its count plus whole recomputed layers) every window but
about one is a few counts wide. The windows are exact whatever λ and UB are: they only decide the speed.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from parplan.solver.deadline import check
from parplan.solver.oracle.recompute import INF

PRODUCT_LIMIT = 1 << 61  # |λ|·count must stay in int64 beside the times; beyond it no windows are drawn
GAP_LIMIT = 1 << 62  # above every e_u of finite times (< spread·(K + 2)): a larger gap closes nothing


class UnitRows:
    """Each unit's finite times at counts 0..caps[u] (``values[u, q]`` ≥ INF: no fit), gathered once."""

    def __init__(self, values: np.ndarray, caps: np.ndarray, deadline: Optional[float]):
        self.deadline, self.num_units = deadline, values.shape[0]
        steps = np.arange(int(caps.max()) + 1)
        self.rows = []  # per unit (counts, times) of its finite entries: views where they are a prefix (the walk's)
        for unit in range(self.num_units):
            times = values[unit, :int(caps[unit]) + 1]
            finite = times < INF
            fits = int(finite.sum())
            if finite[:fits].all():
                self.rows.append((steps[:fits], times[:fits]))
            else:
                counts = np.nonzero(finite)[0]
                self.rows.append((counts, times[counts]))

    def slopes(self) -> tuple[int, int]:
        """The least and largest time per count between a unit's neighbouring finite entries, floored and ceiled
        (0, 0 where no unit has two): past them every unit's least resp. largest finite count minimises."""
        low, high = [], []
        for counts, times in self.rows:
            if len(counts) > 1:
                gaps = np.diff(counts)
                rises = np.diff(times)
                low.append(int((rises // gaps).min()))
                high.append(int((-(-rises // gaps)).max()))
        return (min(low), max(high)) if low else (0, 0)

    def minimisers(self, lam: int) -> tuple[np.ndarray, np.ndarray]:
        """Per unit, min_q (f_u(q) - λ·q) and its largest minimiser (-1 where the unit has no finite entry)."""
        least = np.zeros(self.num_units, np.int64)
        largest = np.full(self.num_units, -1, np.int64)
        for unit, (counts, times) in enumerate(self.rows):
            check(self.deadline)
            if len(counts):
                reduced = times - lam * counts
                least[unit] = reduced.min()
                largest[unit] = counts[len(reduced) - 1 - int(reduced[::-1].argmin())]
        return least, largest


def sum_windows(values: np.ndarray, caps: np.ndarray, spare_steps: int,
                deadline: Optional[float] = None) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(lo, hi): per unit, the least and most count any least split can take (lo > hi for a unit that cannot
    take part: then no split exists); None where the bound cannot be formed in int64 (the caller takes the whole
    rows). ``values``: INF where a count does not fit; ``caps`` at most ``spare_steps``."""
    rows = UnitRows(values, caps, deadline)
    finite = values[:, :int(caps.max()) + 1]
    finite = finite[finite < INF]
    if not len(finite):
        return np.zeros(rows.num_units, np.int64), np.full(rows.num_units, -1, np.int64)
    spread = int(finite.max()) - int(finite.min()) + 1
    if (spread + 1) * (spare_steps + 1) >= PRODUCT_LIMIT:
        return None
    lo, hi = rows.slopes()
    lo, hi = lo - 1, hi + 1  # below: each unit's least finite count minimises; above: its largest
    while lo < hi:
        mid = (lo + hi) // 2
        if int(rows.minimisers(mid)[1].sum()) >= spare_steps:
            hi = mid
        else:
            lo = mid + 1
    lam = lo
    least, upper = rows.minimisers(lam)
    lower = rows.minimisers(lam - 1)[1]
    if (upper < 0).any() or int(upper.sum()) < spare_steps or int(lower.sum()) > spare_steps:
        return np.zeros(rows.num_units, np.int64), np.full(rows.num_units, -1, np.int64)
    bound = lam * spare_steps + sum(int(v) for v in least)
    return _windows(rows, lam, least, min(_upper_bound(values, lower, upper, spare_steps) - bound, GAP_LIMIT))


def _upper_bound(values: np.ndarray, lower: np.ndarray, upper: np.ndarray, spare_steps: int) -> int:
    """The sum of one split: each unit from its count in ``lower`` up toward ``upper``, in unit order, until the
    counts add up to ``spare_steps`` (lower ≤ upper: the minimisers grow with λ)."""
    counts = lower.copy()
    need = spare_steps - int(counts.sum())
    for unit in range(len(counts)):
        add = min(need, int(upper[unit] - counts[unit]))
        counts[unit] += add
        need -= add
    return sum(int(v) for v in values[np.arange(len(counts)), counts])


def _windows(rows: UnitRows, lam: int, least: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Per unit, the least and most finite count whose e_u is within ``gap``."""
    lo = np.zeros(rows.num_units, np.int64)
    hi = np.full(rows.num_units, -1, np.int64)
    for unit, (counts, times) in enumerate(rows.rows):
        check(rows.deadline)
        inside = counts[times - lam * counts - least[unit] <= gap]
        if len(inside):
            lo[unit], hi[unit] = inside[0], inside[-1]
    return lo, hi
