"""One table's least U under a cap (each split's exact solve, and uniform recompute as one fixed-recompute
table per count), and the least peak memory at that U."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from parplan.solver.deadline import check
from parplan.solver.oracle.fallback import per_stage_by_cpsat
from parplan.solver.oracle.grouped import grouped
from parplan.solver.oracle.per_stage import per_stage
from parplan.solver.oracle.recompute import UnitCosts
from parplan.solver.oracle.state import TableSolve
from parplan.solver.assignment_check import evaluate_assignment
from parplan.solver.tables import MIB_KIB, Assignment, StageTable


@dataclass(frozen=True)
class RowSolution:
    """The best assignment of one choice under a cap: its objective U (scaled integer units), peak memory and
    the assignment."""

    U: int
    peak_kib: int
    x: Assignment


def best_at(solve: TableSolve, cap_kib: int) -> Optional[RowSolution]:
    """The least U under ``cap_kib`` (then the least peak at that cap's U is chosen by the caller). Uniform
    recompute: every stage recomputes the same count r; each r is solved as a fixed-recompute table. A DualPipe
    table with whole-layer recompute, whose ranks' splits decide how many stages hold a recompute working set
    as well as the exposed all-to-all (solver/paired_split.py), is solved exactly by its CP-SAT model, as the
    fallback solves tables too large to walk."""
    t = solve.t
    split_solve = per_stage if t.split == "per_stage" else grouped
    if t.t_split is not None:  # DualPipe whose split also places recompute working sets: the table's CP-SAT model
        got = per_stage_by_cpsat(solve, UnitCosts(t, cap_kib))
    elif t.uniform_recompute and t.choice.recompute == "full" and not t.recompute_all:
        got = None
        most_per_stage = t.num_layers // (t.choice.pp if t.choice.pp else 1)
        for r_stage in range(0, most_per_stage + 1, t.recompute_step):
            check(solve.deadline)
            at_count = split_solve(solve, UnitCosts(t, cap_kib, r_stage=r_stage))
            if at_count is not None and (got is None or at_count[0] < got[0]):
                got = at_count
    else:
        fixed = 0 if t.choice.recompute != "full" or t.recompute_all else None
        got = split_solve(solve, UnitCosts(t, cap_kib, r_stage=fixed))
    if got is None:
        return None
    objective, x = got
    evaluated, peak = evaluate_assignment(t, x)
    assert evaluated == objective, (evaluated, objective)
    return RowSolution(objective, peak, x)


def solve_table(t: StageTable, cap_kib: int, deadline: Optional[float] = None) -> Optional[RowSolution]:
    """Least-U assignment of one choice under ``cap_kib`` (None if nothing fits). Raises :class:`TimeUp` past
    ``deadline``. Its peak is that assignment's; :func:`least_peak` finds the least peak at that U."""
    return best_at(TableSolve(t, deadline), cap_kib)


def peak_mib(peak_kib: int) -> int:
    """Peak memory in whole MiB, rounded up: the resolution at which ties between plans are broken."""
    return -(-int(peak_kib) // MIB_KIB)


def least_peak(t: StageTable, cap_kib: int, best: RowSolution, deadline: Optional[float] = None) -> RowSolution:
    """Among the assignments of U = ``best.U`` under ``cap_kib``, one of least peak memory in MiB (bisection on
    the cap: the least cap whose least U is still ``best.U``)."""
    solve = TableSolve(t, deadline, target=best.U)
    lo, hi, top = 0, min(peak_mib(best.peak_kib), cap_kib // MIB_KIB), best
    if peak_mib(best.peak_kib) > cap_kib // MIB_KIB:
        return best  # the cap itself is not a whole MiB: nothing lower to look for at MiB resolution
    while lo < hi:
        mid = (lo + hi) // 2
        got = best_at(solve, mid * MIB_KIB)
        if got is not None and got.U <= best.U:
            hi, top = mid, got
        else:
            lo = mid + 1
    return top
