"""The oracle's one remaining use of the CP-SAT model: a DualPipe table with whole-layer recompute
(``StageTable.t_split``, whose ranks' splits also place recompute working sets; :func:`.solve.best_at`) takes
its exact answer from the CP-SAT model of the table, one worker, within the deadline. The oracle has no method
of its own for it yet, so for these tables it does not check the model independently (issue 37 item 5)."""

from __future__ import annotations

import time

from parplan.solver import cpsat
from parplan.solver.deadline import TimeUp
from parplan.solver.oracle.recompute import UnitCosts
from parplan.solver.oracle.state import TableSolve

FALLBACK_LIMIT_S = 3600.0  # a solve without a deadline


def per_stage_by_cpsat(solve: TableSolve, units: UnitCosts):
    """(U, assignment), or None where nothing fits; past the deadline :class:`TimeUp`."""
    left = FALLBACK_LIMIT_S if solve.deadline is None else solve.deadline - time.perf_counter()
    if left <= 0:
        raise TimeUp()
    out = cpsat.solve(solve.t, units.cap, cpsat.SolverControls(workers=1, deterministic=True), left)
    if out.status == "INFEASIBLE":
        return None
    if out.status != "OPTIMAL":
        raise TimeUp()
    return out.value, out.x
