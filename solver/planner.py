"""The planner: search the space with CP-SAT (or exhaustively), re-evaluate every answer with the cost model.

``optimize(spec)`` is the one entry point the CLI, the service and embedding code call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Literal, Optional

import numpy as np
from ortools import __version__ as ORTOOLS_VERSION

from parplan.costmodel.evaluate import Evaluation
from parplan.costmodel.hardware import GIB
from parplan.costmodel.spec import Spec
from parplan.solver import cpsat
from parplan.solver.bounds import lower_bounds
from parplan.solver.cpsat import SolverControls
from parplan.solver.exhaustive import Assignment, search, solve_row
from parplan.solver.problem import Problem
from parplan.solver.result import PlanResult, SolveStats
from parplan.solver.space import SpaceOptions
from parplan.solver.tables import D, KIB

Method = Literal["cpsat", "exhaustive"]
MIB_KIB = 1024
HEURISTIC_ROWS = 24  # feasible rows the heuristic solves before CP-SAT (its hint and pruning bound)


@dataclass
class Found:
    """One solution in solver units, before re-evaluation."""

    row_index: int
    x: dict
    U: int
    peak_kib: int


@dataclass
class SearchOutcome:
    status: str
    found: list[Found]
    bound: Optional[int]
    searched: int


class _Searcher:
    """Minimum-U searches over one problem under a memory cap, by either method."""

    def __init__(self, problem: Problem, method: Method, controls: SolverControls,
                 on_solution: Optional[Callable[[Evaluation, float, float], None]] = None):
        self.p, self.method, self.controls, self.on_solution = problem, method, controls, on_solution
        self._lb: dict[int, np.ndarray] = {}

    def lb(self, cap: int) -> np.ndarray:
        if cap not in self._lb:
            self._lb[cap] = lower_bounds(self.p.rows, self.p.num_layers, cap)
        return self._lb[cap]

    def _row_solve(self, i: int, cap: int):
        P = self.p
        return solve_row(P.rows[i], P.num_layers, P.options.uneven_stages, P.options.uniform_recompute, cap)

    def best(self, cap: int, k: int = 1, upper_bound: Optional[int] = None) -> SearchOutcome:
        P = self.p
        if not P.rows:
            return SearchOutcome("INFEASIBLE", [], None, 0)
        lb = self.lb(cap)
        if self.method == "exhaustive":
            rows = [P.rows[i] for i in range(len(P.rows))]
            res = _exhaustive(rows, P, cap, k, lb, upper_bound)
            return SearchOutcome("OPTIMAL" if res else "INFEASIBLE", res, res[0].U if res else None,
                                 int(np.isfinite(lb).sum()))
        # heuristic: exact per-row solves in bound order give the hint and the pruning bound
        order = [int(i) for i in np.argsort(lb, kind="stable") if np.isfinite(lb[i])]
        heur: list[Found] = []
        tried = 0
        for i in order:
            if len(heur) >= max(k, HEURISTIC_ROWS) or tried >= 4 * HEURISTIC_ROWS + k:
                break
            tried += 1
            r = self._row_solve(i, cap)
            if r is not None:
                heur.append(Found(i, r[2], r[0], r[1]))
        heur.sort(key=lambda f: (f.U, f.peak_kib, f.row_index))
        bound = heur[k - 1].U if len(heur) >= k else upper_bound
        if upper_bound is not None and bound is not None:
            bound = min(bound, upper_bound)
        cand = [i for i in order if bound is None or lb[i] <= bound]
        found: list[Found] = []
        status = "OPTIMAL"
        best_bound = None
        excluded: set[int] = set()
        for j in range(k):
            idx = [i for i in cand if i not in excluded]
            hint = next(((f.row_index, f.x) for f in heur if f.row_index not in excluded), None)
            res = cpsat.solve(P.rows, idx, P.num_layers, cap, P.options.uneven_stages, P.options.uniform_recompute,
                              self.controls, upper_bound=bound, hint=hint,
                              on_solution=self._stream if j == 0 else None)
            if res.status in ("INFEASIBLE",) or res.row_index is None:
                if res.status == "UNKNOWN":
                    status = "UNKNOWN" if not found else "FEASIBLE"
                break
            if res.status == "FEASIBLE":
                status = "FEASIBLE"
            if j == 0:
                best_bound = res.bound
            r = P.rows[res.row_index]
            from parplan.solver.tables import evaluate_row

            U, peak, _ = evaluate_row(r, res.x)
            found.append(Found(res.row_index, res.x, U, peak))
            excluded.add(res.row_index)
        if not found:
            status = "INFEASIBLE" if status == "OPTIMAL" else status
        return SearchOutcome(status, found, best_bound, len(cand))

    def _stream(self, row_index: int, x: dict, objective: int, bound: int, wall: float) -> None:
        if self.on_solution is None:
            return
        plan = self.p.plan(self.p.rows[row_index], x)
        self.on_solution(self.p.evaluate(plan), objective / D / 1e9, bound / D / 1e9)

    def min_peak(self, upper_U: Optional[int] = None) -> Optional[int]:
        """Smallest peak memory (MiB) over plans with U ≤ upper_U (no cap), by bisection on the cap."""
        lo, hi = 0, self.p.cap_kib // MIB_KIB
        if not self._feasible(hi * MIB_KIB, upper_U):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if self._feasible(mid * MIB_KIB, upper_U):
                hi = mid
            else:
                lo = mid + 1
        return hi

    def _feasible(self, cap: int, upper_U: Optional[int]) -> bool:
        P = self.p
        lb = self.lb(cap)
        order = np.argsort(lb, kind="stable")
        for i in order:
            if not np.isfinite(lb[i]) or (upper_U is not None and lb[i] > upper_U):
                return False
            r = self._row_solve(int(i), cap)
            if r is not None and (upper_U is None or r[0] <= upper_U):
                return True
        return False


def _exhaustive(rows, P: Problem, cap: int, k: int, lb: np.ndarray, upper_bound: Optional[int]) -> list[Found]:
    res: list[Assignment] = search(rows, P.num_layers, P.options.uneven_stages, P.options.uniform_recompute, cap,
                                   top_k=k, upper_bound=upper_bound, bounds=lb)
    index = {id(r): i for i, r in enumerate(P.rows)}
    return [Found(index[id(a.row)], a.x, a.U, a.peak_kib) for a in res]


def _stats(method, t0, problem, outcome: SearchOutcome, controls: SolverControls, objective_scale: float) -> SolveStats:
    value = outcome.found[0].U * objective_scale if outcome.found else None
    bound = outcome.bound * objective_scale if outcome.bound is not None else None
    gap = None
    if value is not None and bound is not None and value > 0:
        gap = max(0.0, (value - bound) / value)
    return SolveStats(method=method, wall_time_s=time.perf_counter() - t0, choices_total=len(problem.rows),
                      choices_searched=outcome.searched, objective_value=value, best_bound=bound, gap=gap,
                      workers=1 if controls.deterministic else controls.workers, seed=controls.seed,
                      deterministic=controls.deterministic, ortools_version=ORTOOLS_VERSION)


def optimize(spec: Spec, *, method: Method = "cpsat", top_k: int = 1, pareto: Optional[str] = None,
             controls: Optional[SolverControls] = None,
             on_solution: Optional[Callable[[Evaluation, float, float], None]] = None) -> PlanResult:
    """Best plans for the spec's objective; Pareto frontier on request; an explanation if nothing fits."""
    t0 = time.perf_counter()
    controls = controls or SolverControls()
    if spec.objective == "min_gpus":
        from parplan.solver.frontier import min_gpus

        return min_gpus(spec, method=method, top_k=top_k, controls=controls, t0=t0)
    problem = Problem.build(spec)
    s = _Searcher(problem, method, controls, on_solution)
    cap = problem.cap_kib
    if spec.objective == "min_memory":
        peak = s.min_peak()
        outcome = s.best(cap, top_k) if peak is None else s.best(peak * MIB_KIB, top_k)
    else:
        outcome = s.best(cap, top_k)
    plans = [problem.evaluate(problem.plan(problem.rows[f.row_index], f.x)) for f in outcome.found]
    status = outcome.status if plans else ("INFEASIBLE" if outcome.status in ("OPTIMAL", "INFEASIBLE") else outcome.status)
    result = PlanResult(status=status, objective=spec.objective, plans=plans,
                        stats=_stats(method, t0, problem, outcome, controls, 1 / D / 1e9))
    if pareto and plans:
        from parplan.solver.frontier import gpu_frontier, memory_frontier

        if pareto == "memory":
            result.pareto = memory_frontier(s)
        else:
            result.pareto = gpu_frontier(spec, method=method, controls=controls)
        result.pareto_axis = pareto
    if status == "INFEASIBLE":
        from parplan.solver.explain import explain

        result.explanation = explain(spec, problem, method=method, controls=controls)
    result.stats.wall_time_s = time.perf_counter() - t0
    return result


def gib(kib: int) -> float:
    return kib * KIB / GIB
