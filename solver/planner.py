"""The planner: search the space with CP-SAT (or exhaustively), re-evaluate every answer with the cost model.

``optimize(spec)`` is the one entry point the CLI, the service and embedding code call.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import Callable, Literal, Optional

import numpy as np
from ortools import __version__ as ORTOOLS_VERSION

from parplan.costmodel.evaluate import Evaluation
from parplan.costmodel.hardware import GIB
from parplan.costmodel.spec import Spec
from parplan.solver import cpsat
from parplan.solver.arguments import check_optimize_arguments
from parplan.solver.bounds import lower_bounds
from parplan.solver.cpsat import SolverControls
from parplan.solver.exhaustive import solve_row
from parplan.solver.problem import Problem
from parplan.solver.result import PlanResult, SolveStats, Timing
from parplan.solver.tables import D, KIB, evaluate_row

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
    """Minimum-U searches over one problem under a memory cap, by either method.

    Choices are visited in the order of their quick bound (from the choice alone); a choice's table and
    its relaxation bound are built only when that bound could still beat the best plan known.
    """

    CHUNK = 64

    def __init__(self, problem: Problem, method: Method, controls: SolverControls,
                 on_solution: Optional[Callable[[Evaluation, float, float], None]] = None):
        self.p, self.method, self.controls, self.on_solution = problem, method, controls, on_solution
        self._lb: dict = {}
        self.solved = 0

    def lbs(self, idx: list[int], cap: int) -> np.ndarray:
        """Relaxation lower bounds of U (np.inf: cannot fit) for the choices ``idx``."""
        cache = self._lb.setdefault(cap, {})
        missing = [i for i in idx if i not in cache]
        if missing:
            vals = lower_bounds([self.p.row(i) for i in missing], self.p.num_layers, cap)
            cache.update(zip(missing, vals.tolist()))
        return np.array([cache[i] for i in idx], dtype=float)

    def _row_solve(self, i: int, cap: int):
        P = self.p
        self.solved += 1
        return solve_row(P.row(i), P.num_layers, P.options.uneven_stages, P.options.uniform_recompute, cap)

    def ranked(self, cap: int) -> list[tuple[int, float]]:
        """(choice, relaxation bound) for every choice that may fit under ``cap``, best bound first.

        Choices whose weights and optimizer states alone exceed the cap are skipped without building
        their tables (a valid memory bound)."""
        key = ("ranked", cap)
        if key not in self._lb:
            eligible = self.p.order(cap)
            lbs = self.lbs(eligible, cap)
            self._lb[key] = sorted(((i, lb) for i, lb in zip(eligible, lbs.tolist()) if np.isfinite(lb)),
                                   key=lambda t: (t[1], t[0]))
        return self._lb[key]

    def _exhaustive(self, cap: int, k: int, upper_bound: Optional[int]) -> list[Found]:
        heap: list[tuple] = []  # max-heap of (-U, -peak, -i, x)
        for i, lb in self.ranked(cap):
            limit = -heap[0][0] if len(heap) >= k else None
            if upper_bound is not None:
                limit = upper_bound if limit is None else min(limit, upper_bound)
            if limit is not None and lb > limit:
                break
            res = self._row_solve(i, cap)
            if res is None or (upper_bound is not None and res[0] > upper_bound):
                continue
            U, peak, x = res
            item = (-U, -peak, -i, x)
            if len(heap) < k:
                heapq.heappush(heap, item)
            elif (U, peak, i) < (-heap[0][0], -heap[0][1], -heap[0][2]):
                heapq.heapreplace(heap, item)
        out = sorted(heap, key=lambda t: (-t[0], -t[1], -t[2]))
        return [Found(-ni, x, -nU, -npk) for nU, npk, ni, x in out]

    def best(self, cap: int, k: int = 1, upper_bound: Optional[int] = None) -> SearchOutcome:
        P = self.p
        if self.method == "exhaustive":
            res = self._exhaustive(cap, k, upper_bound)
            return SearchOutcome("OPTIMAL" if res else "INFEASIBLE", res, res[0].U if res else None, self.solved)
        ranked = self.ranked(cap)
        # heuristic: exact per-choice solves in bound order give the hint and the pruning bound
        heur: list[Found] = []
        for n, (i, _) in enumerate(ranked):
            if len(heur) >= max(k, HEURISTIC_ROWS) or n >= 4 * HEURISTIC_ROWS + k:
                break
            r = self._row_solve(i, cap)
            if r is not None:
                heur.append(Found(i, r[2], r[0], r[1]))
        heur.sort(key=lambda f: (f.U, f.peak_kib, f.row_index))
        bound = heur[k - 1].U if len(heur) >= k else upper_bound
        if upper_bound is not None and bound is not None:
            bound = min(bound, upper_bound)
        cand = [i for i, lb in ranked if bound is None or lb <= bound]
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
            if res.row_index is None:
                if res.status == "UNKNOWN":
                    status = "UNKNOWN" if not found else "FEASIBLE"
                break
            if res.status == "FEASIBLE":
                status = "FEASIBLE"
            if j == 0:
                best_bound = res.bound
            U, peak, _ = evaluate_row(P.row(res.row_index), res.x)
            found.append(Found(res.row_index, res.x, U, peak))
            excluded.add(res.row_index)
        if not found:
            status = "INFEASIBLE" if status == "OPTIMAL" else status
        return SearchOutcome(status, found, best_bound, len(cand))

    def _stream(self, row_index: int, x: dict, objective: int, bound: int, wall: float) -> None:
        if self.on_solution is None:
            return
        plan = self.p.plan(self.p.row(row_index), x)
        self.on_solution(self.p.evaluate(plan), objective / D / 1e9, bound / D / 1e9)

    def min_peak(self, upper_U: Optional[int] = None) -> Optional[int]:
        """Smallest peak memory (MiB) over plans with U ≤ upper_U, by bisection on the cap."""
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
        return bool(self._exhaustive(cap, 1, upper_U))


def best_plans(spec: Spec, method: Method, controls: SolverControls, *, options=None, num_gpus: Optional[int] = None,
               cap_kib: Optional[int] = None, top_k: int = 1) -> tuple[Problem, SearchOutcome]:
    """The ``top_k`` best plans of one space (GPU count, options, memory cap): the one search the frontiers and
    the explanations repeat over GPU counts and relaxed options."""
    problem = Problem.build(spec, options=options, num_gpus=num_gpus)
    return problem, _Searcher(problem, method, controls).best(cap_kib or problem.cap_kib, top_k)


def _stats(method, problem, outcome: SearchOutcome, controls: SolverControls, objective_scale: float) -> SolveStats:
    value = outcome.found[0].U * objective_scale if outcome.found else None
    bound = outcome.bound * objective_scale if outcome.bound is not None else None
    gap = None
    if value is not None and bound is not None and value > 0:
        gap = max(0.0, (value - bound) / value)
    return SolveStats(method=method, choices_total=len(problem.choices),
                      choices_searched=outcome.searched, objective_value=value, best_bound=bound, gap=gap,
                      workers=1 if controls.deterministic else controls.workers, seed=controls.seed,
                      deterministic=controls.deterministic, ortools_version=ORTOOLS_VERSION)


def optimize(spec: Spec, *, method: Method = "cpsat", top_k: int = 1, pareto: Optional[str] = None,
             controls: Optional[SolverControls] = None,
             on_solution: Optional[Callable[[Evaluation, float, float], None]] = None) -> PlanResult:
    """Best plans for the spec's objective; Pareto frontier on request; an explanation if nothing fits."""
    t0 = time.perf_counter()
    controls = controls or SolverControls()
    check_optimize_arguments(top_k=top_k, method=method, pareto=pareto, time_limit_s=controls.time_limit_s,
                             workers=controls.workers, seed=controls.seed, deterministic=controls.deterministic)
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
    plans = [problem.evaluate(problem.plan(problem.row(f.row_index), f.x)) for f in outcome.found]
    status = outcome.status if plans else ("INFEASIBLE" if outcome.status in ("OPTIMAL", "INFEASIBLE") else outcome.status)
    result = PlanResult(status=status, objective=spec.objective, plans=plans,
                        stats=_stats(method, problem, outcome, controls, 1 / D / 1e9))
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
    if not controls.deterministic:  # clock readings would break byte-identical output (see Timing)
        result.timing = Timing(wall_time_s=time.perf_counter() - t0)
    return result


def gib(kib: int) -> float:
    return kib * KIB / GIB
