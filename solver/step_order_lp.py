"""The linear relaxation of a DualPipe choice's cuts (issue 39 item 1): a lower bound of its step order that sees the
layer budget across the cuts at once, where the branch and bound's per-cut least values (solver/step_order_branch.py)
each place the lighter units where that one cut gains most.

Each unit picks one option (a fraction ``x[u, o]`` of each, summing to 1), the options' layers sum to the model's, and
``Z ≥`` every cut priced at the fractions, ``D ≥`` every unit's DP time at them; the least ``Z + D`` is at most the
least ``max over cuts + max over units' DP time`` over the integer choices (those are among the fractional ones), so at
most the step order of every plan of the choice. Solved by GLOP (OR-Tools' simplex); its answer is taken less
``LP_REL`` of itself (the simplex's tolerances). On DeepSeek-V3's research space the relaxation at the root was
23.42 s where the per-cut bound was 22.57 s (the best plan, 24.57 s): it closes the choices whose every plan is far
above the best known, which the per-cut bound leaves to a long search (benchmarks/step_order_search.py, 405B on 2048
H100: a 64-stage choice).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from ortools.linear_solver import pywraplp

LP_REL = 1e-6  # the relaxation's value is taken this much below the simplex's answer


class CutsLP:
    """The relaxation (module docstring) as a model that grows: a fraction per option of every unit summing to 1,
    ``D ≥`` every unit's DP time, the options' layers summing to ``layers`` where given, ``Z ≥`` each cut
    :meth:`add`-ed; minimise ``Z + D``. :meth:`restrict` keeps only some options (a pattern's: solver/
    step_order_patterns.py, whose units' layers are fixed, so it gives no ``layers``); GLOP starts each solve from the
    last basis."""

    def __init__(self, tots: list[np.ndarray], dps: list[np.ndarray], layers: Optional[int] = None):
        s = self.solver = pywraplp.Solver.CreateSolver("GLOP")
        self.x = [[s.NumVar(0.0, 1.0, "") for _ in range(len(t))] for t in tots]
        budget = s.Constraint(float(layers), float(layers)) if layers is not None else None
        for xs, t in zip(self.x, tots):
            one = s.Constraint(1.0, 1.0)
            for v, n in zip(xs, t.tolist()):
                one.SetCoefficient(v, 1.0)
                if budget is not None:
                    budget.SetCoefficient(v, float(n))
        self.z, d = s.NumVar(0.0, s.infinity(), "z"), s.NumVar(0.0, s.infinity(), "d")
        for xs, dp in zip(self.x, dps):
            row = s.Constraint(0.0, s.infinity())
            row.SetCoefficient(d, 1.0)
            for v, c in zip(xs, dp.tolist()):
                row.SetCoefficient(v, -c)
        objective = s.Objective()
        objective.SetCoefficient(self.z, 1.0)
        objective.SetCoefficient(d, 1.0)
        objective.SetMinimization()

    def restrict(self, allowed: list[np.ndarray]) -> None:
        """Only the options ``allowed`` (a mask per unit)."""
        for xs, ok in zip(self.x, allowed):
            for v, a in zip(xs, ok.tolist()):
                v.SetUb(1.0 if a else 0.0)

    def add(self, prices: list[np.ndarray]) -> None:
        """``Z ≥`` a cut priced per unit option (``prices[u]``: the cut's price of each of unit u's options)."""
        cut = self.solver.Constraint(0.0, self.solver.infinity())
        cut.SetCoefficient(self.z, 1.0)
        for xs, g in zip(self.x, prices):
            for v, c in zip(xs, g.tolist()):
                if c:
                    cut.SetCoefficient(v, -c)

    def solve(self) -> Optional[tuple[float, float, list[np.ndarray]]]:
        """(the least ``Z + D`` less ``LP_REL`` of itself, Z, the fractions), or None where GLOP does not answer."""
        if self.solver.Solve() != pywraplp.Solver.OPTIMAL:
            return None
        x = [np.array([v.solution_value() for v in xs]) for xs in self.x]
        return self.solver.Objective().Value() * (1 - LP_REL), self.z.solution_value(), x


def lp_bound_s(tots: list[np.ndarray], prices: list[np.ndarray], dps: list[np.ndarray], layers: int) -> float:
    """The relaxation's least value (module docstring), seconds: ``tots[u]``, ``dps[u]`` each option's layers and DP
    time, ``prices[u]`` its price under every cut ([cuts, options]); -inf where GLOP does not answer."""
    lp = CutsLP(tots, dps, layers)
    for k in range(prices[0].shape[0] if prices else 0):
        lp.add([g[k] for g in prices])
    answer = lp.solve()
    return answer[0] if answer is not None else -np.inf
