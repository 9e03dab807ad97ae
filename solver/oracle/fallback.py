"""The oracle's two remaining uses of the CP-SAT model, each taking the exact answer of the CP-SAT model of the
table, one worker, within the deadline:

* a DualPipe table with whole-layer recompute (``StageTable.t_split``, whose ranks' splits also place recompute
  working sets; :func:`.solve.best_at`): the oracle has no method of its own for it yet;
* a table whose summed-time walk (:func:`.per_stage.pooled_walk`) would not fit the call's memory budget (its
  tables hold every unit's time at every count: 64 stages of 10^6 layers under memory pressure ask ~8 GiB), where
  the CP-SAT model needs ~100 MiB (benchmarks/pressured_oracle.py): answered, not refused.

For these tables the oracle does not check the model independently (issue 37 item 5)."""

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
