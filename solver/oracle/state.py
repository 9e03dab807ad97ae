"""What every split's solve of one table shares: the table, the deadline, an optional target, and turning a
layer split into an :class:`Assignment` with each unit's least recompute."""

from __future__ import annotations

from typing import Optional

import numpy as np

from parplan.solver.oracle.recompute import INF, UnitCosts
from parplan.solver.tables import Assignment, StageTable


class TableSolve:
    """The exact solve of one table, for one cap and (if uniform) one per-stage recompute count."""

    def __init__(self, t: StageTable, deadline: Optional[float], target: Optional[int] = None):
        """``target``: only whether some assignment reaches U ≤ target matters (the walk stops there)."""
        self.t, self.deadline, self.target = t, deadline, target

    def done(self, best_objective: int, next_objective_floor: int) -> bool:
        """Stop walking τ: nothing further can beat the best, or the target is already met or out of reach."""
        if next_objective_floor >= best_objective:
            return True
        return self.target is not None and (best_objective <= self.target or next_objective_floor > self.target)

    def assign(self, units: UnitCosts, layers: np.ndarray) -> Optional[Assignment]:
        """The assignment of ``layers`` with each unit's least recompute (a first_last middle shares the
        largest); None where some unit does not fit."""
        times, _, dense, moe = units.at(np.asarray(layers, np.int64))
        if (times >= INF).any():
            return None
        moe = moe.copy()
        t = self.t
        if t.split == "first_last" and not units.fixed_recompute and t.num_units >= 3:
            mid = list(range(1, t.num_units - 1)) if not t.one_end else list(range(1, t.num_units))
            moe[mid] = moe[mid].max()
        return Assignment(tuple(int(v) for v in layers), tuple(int(v) for v in moe), int(dense[0]))
