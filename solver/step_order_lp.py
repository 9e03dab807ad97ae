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

import numpy as np
from ortools.linear_solver import pywraplp

LP_REL = 1e-6  # the relaxation's value is taken this much below the simplex's answer


def lp_bound_s(tots: list[np.ndarray], prices: list[np.ndarray], dps: list[np.ndarray], layers: int) -> float:
    """The relaxation's least value (module docstring), seconds: ``tots[u]``, ``dps[u]`` each option's layers and DP
    time, ``prices[u]`` its price under every cut ([cuts, options]); -inf where GLOP does not answer."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        return -np.inf
    x = [[solver.NumVar(0.0, 1.0, "") for _ in range(len(t))] for t in tots]
    budget = solver.Constraint(float(layers), float(layers))
    for xs, t in zip(x, tots):
        one = solver.Constraint(1.0, 1.0)
        for v, n in zip(xs, t.tolist()):
            one.SetCoefficient(v, 1.0)
            budget.SetCoefficient(v, float(n))
    z, d = solver.NumVar(0.0, solver.infinity(), "z"), solver.NumVar(0.0, solver.infinity(), "d")
    for k in range(prices[0].shape[0] if prices else 0):
        cut = solver.Constraint(0.0, solver.infinity())
        cut.SetCoefficient(z, 1.0)
        for xs, g in zip(x, prices):
            for v, c in zip(xs, g[k].tolist()):
                cut.SetCoefficient(v, -c)
    for xs, dp in zip(x, dps):
        row = solver.Constraint(0.0, solver.infinity())
        row.SetCoefficient(d, 1.0)
        for v, c in zip(xs, dp.tolist()):
            row.SetCoefficient(v, -c)
    objective = solver.Objective()
    objective.SetCoefficient(z, 1.0)
    objective.SetCoefficient(d, 1.0)
    objective.SetMinimization()
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return -np.inf
    return objective.Value() * (1 - LP_REL)
