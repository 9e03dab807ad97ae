"""The one search over a problem's choices that the planner, the frontiers and the explanations share.

Branch and bound over choices: they are visited in the order of their quick bound (from the choice alone; the
queue of solver/search_queue.py, which layer-bounds them a chunk at a time once a plan is known);
a choice's table and its relaxation bound are built only when that bound could still beat the K-th best
plan known; a choice that may is solved exactly, either by CP-SAT (``cpsat``: the per-stage model of
:mod:`cpsat`, hinted with a balanced split, with the K-th best U as a cutoff) or by the per-choice oracle
(``exhaustive``: :mod:`oracle`). The search is exact (OPTIMAL or INFEASIBLE) when it runs to the end; past
its deadline, or cancelled, it says FEASIBLE (with the best plans known) or UNKNOWN, with the least bound
of what it did not solve.

Ties: equal U, then less peak memory in whole MiB (each choice's least peak at its U), then the choice's place in the
enumeration (tp, cp, pp, ep, etp, micro-batch size, schedule, vpp, ZeRO stage, recompute, SP ascending).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import Callable, Literal, Optional, Sequence

import numpy as np

from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.solver import cpsat
from parplan.solver.assignment_check import evaluate_assignment
from parplan.solver.cpsat import SolverControls
from parplan.solver.deadline import OverBudget, TimeUp, past
from parplan.solver.oracle import (INF, RowSolution, UnitCosts, fill_levels, fill_order, least_peak, peak_mib,
                                   solve_table)
from parplan.solver.problem import Problem
from parplan.solver.search_queue import SearchQueue
from parplan.solver.tables import MIB_KIB, Assignment, StageTable

Method = Literal["cpsat", "exhaustive"]
# while no plan is known, every this many mean-unit bounds the search solves the choice of least bound among those
# bounded so far (a probe): a plan early, so a call cut short by its time limit answers FEASIBLE, not UNKNOWN; the
# probed choice is then done and skipped when its turn comes (the search stays exact: a probe only adds a solution).
# A candidate whose relaxation says nothing fits is done without a solve, and the next one is probed at once
PROBE_EVERY = 512
# CP-SAT's share of the call's time for one choice's model: past it, the exhaustive oracle solves the same table
# (exactly, by sorting; solver/oracle) -- a rare model CP-SAT cannot close quickly (e.g. Llama-3 70B's TP4 PP8
# interleaved full-recompute choice under a cutoff, still open after 40 s) no longer holds the whole call
CPSAT_CHOICE_S = 5.0
# the queue's levels (Searcher.best): 0 quick bound, 1 layer bound, 2 mean-unit bound, 3 relaxation without the paired
# exposure (DualPipe's), then the full relaxation; a choice queued at SOLVE is solved when it comes first
SOLVE = 4


@dataclass(frozen=True)
class Found:
    """One solution in solver units, before re-evaluation."""

    row_index: int
    x: Assignment
    U: int
    peak_kib: int


@dataclass
class SearchOutcome:
    status: str  # OPTIMAL | INFEASIBLE | FEASIBLE | UNKNOWN
    found: list[Found]
    bound: Optional[float]  # lower bound of the best U over the whole space
    searched: int  # choices solved


def balanced_hint(t: StageTable, cap_kib: int) -> Optional[Assignment]:
    """A fast heuristic: layers as level as the minima allow, each unit's least recompute (None if it does not
    fit)."""
    g = t.grid
    units = UnitCosts(t, cap_kib, r_stage=None if t.choice.recompute == "full" and not t.uniform_recompute
                      and not t.recompute_all else 0)
    if t.layers_fixed is not None:
        layers = t.layers_fixed
    else:
        spare = t.num_layers - int(units.layers_min.sum())
        if spare < 0 or spare % g:
            return None
        K = spare // g
        steps = fill_levels(np.full(t.num_units, K, np.int64), K, fill_order(t.num_units))
        layers = units.layers_min + g * steps
        if t.split == "first_last" and t.num_units >= 3:
            return None
    T, _, dense, moe = units.at(np.asarray(layers, np.int64))
    if (T >= INF).any():
        return None
    return Assignment(tuple(int(v) for v in layers), tuple(int(v) for v in moe), int(dense[0]))


def _limit(kbest: list[int], k: int, upper_bound: Optional[int]) -> Optional[int]:
    """The U a candidate's bound must not exceed: the K-th least U found (``kbest``, negated max-heap) once ``k``
    are known, and ``upper_bound``, the lower; None while neither holds."""
    limit = -kbest[0] if len(kbest) >= k else None
    if upper_bound is not None:
        limit = upper_bound if limit is None else min(limit, upper_bound)
    return limit


def _keep_k_least(kbest: list[int], k: int, U: int) -> None:
    """``U`` into ``kbest``, the negated max-heap of the ``k`` least U found."""
    if len(kbest) < k:
        heapq.heappush(kbest, -U)
    elif U < -kbest[0]:
        heapq.heapreplace(kbest, -U)


class Searcher:
    """Least-U searches over one problem under a memory cap, by either method, within one deadline."""

    def __init__(self, problem: Problem, method: Method, controls: SolverControls, deadline: Optional[float] = None,
                 on_solution: Optional[Callable[[Evaluation, float, float], None]] = None):
        self.p, self.method, self.controls, self.on_solution = problem, method, controls, on_solution
        self.deadline = deadline
        self.solved = 0
        self._cache: dict[tuple[int, int], Optional[RowSolution]] = {}
        self._lb: dict[tuple[int, int], float] = {}
        self._peak: dict[tuple[int, int, int], RowSolution] = {}  # least_peak's answers: a re-ranking search asks again

    # ------------------------------------------------------------------ one choice
    def remaining_s(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.perf_counter()

    def _stop(self) -> bool:
        c = self.controls.cancel
        return self.remaining_s() <= 0 or (c is not None and c.is_set()) or past(self.deadline)

    def bound(self, i: int, cap: int) -> float:
        key = (i, cap)
        if key not in self._lb:
            self._lb[key] = max(float(self.p.quick_lb[i]), self.p.relaxed_bound(i, cap))
        return self._lb[key]

    def relaxed_without_exposure(self, i: int, cap: int) -> float:
        """The continuous relaxation of choice ``i``'s table less its paired exposure (bounds.relaxed_bound; the
        table itself where the choice leaves none exposed): infinite exactly where nothing fits either way."""
        return self.p.relaxed_bound(i, cap, exposure=False)

    def solve_choice(self, i: int, cap: int, cutoff: Optional[int] = None) -> Optional[RowSolution]:
        """The least-U assignment of choice ``i`` under ``cap`` (None: nothing fits, or nothing reaches
        ``cutoff``); raises TimeUp past the deadline or on cancellation."""
        key = (i, cap)
        if key in self._cache:
            sol = self._cache[key]
            return sol if sol is None or cutoff is None or sol.U <= cutoff else None
        if self._stop():
            raise TimeUp()
        t = self.p.table(i)
        self.solved += 1
        status = out = None
        if self.method == "cpsat":
            lb = self.bound(i, cap)
            status, out = self._cpsat(t, cap, min(self.remaining_s(), self.controls.time_limit_s), cutoff=cutoff,
                                      hint=balanced_hint(t, cap), lower_bound=int(lb) if np.isfinite(lb) else None)
        if status in (None, "OPEN"):  # the oracle: the method, or a model CP-SAT left open in its share (exact)
            sol = solve_table(t, cap, self.deadline)
            self._cache[key] = sol
            return sol if sol is None or cutoff is None or sol.U <= cutoff else None
        if status == "OPTIMAL":
            U, peak = evaluate_assignment(t, out.x)
            sol = RowSolution(U, peak, out.x)
            if cutoff is None:
                self._cache[key] = sol
            return sol
        if status == "INFEASIBLE":
            if cutoff is None:
                self._cache[key] = None
            return None
        if status == "MODEL_INVALID":
            raise RuntimeError(f"CP-SAT rejected the stage model of choice {t.choice} (a modelling bug)")
        raise TimeUp()  # FEASIBLE or UNKNOWN: the solve ran out of time

    def _cpsat(self, t: StageTable, cap: int, budget_s: float, **kw):
        """(status, outcome) of CP-SAT on one table within its per-choice share of the call (CPSAT_CHOICE_S);
        status "OPEN" where that share ran out (building the model included) while the call has time left: the
        caller hands the table to the oracle. Raises TimeUp past the call's own deadline."""
        share = budget_s > CPSAT_CHOICE_S
        try:
            out = cpsat.solve(t, cap, self.controls, min(budget_s, CPSAT_CHOICE_S), **kw)
        except OverBudget:  # the model does not fit the memory budget: left unsolved, as before
            raise
        except TimeUp:
            if share and not self._stop():
                return "OPEN", None
            raise
        if out.status in ("FEASIBLE", "UNKNOWN") and share and not self._stop():
            return "OPEN", None
        return out.status, out

    def least_peak(self, i: int, cap: int, sol: RowSolution) -> RowSolution:
        """Among choice ``i``'s assignments of U = sol.U under ``cap``, one of least peak memory (memoized per
        (choice, cap, U): solver/replan.py searches twice and ranks the same choice in both)."""
        key = (i, cap, sol.U)
        if key not in self._peak:
            self._peak[key] = self._least_peak(i, cap, sol)
        return self._peak[key]

    def _least_peak(self, i: int, cap: int, sol: RowSolution) -> RowSolution:
        t = self.p.table(i)
        if self.method == "exhaustive":
            return least_peak(t, cap, sol, self.deadline)
        status, out = self._cpsat(t, cap, min(self.remaining_s(), self.controls.time_limit_s), hint=sol.x,
                                  hold_objective=sol.U)
        if status == "OPEN":
            return least_peak(t, cap, sol, self.deadline)
        if status != "OPTIMAL":
            if status == "MODEL_INVALID":
                raise RuntimeError(f"CP-SAT rejected the peak model of choice {t.choice}")
            raise TimeUp()
        U, peak = evaluate_assignment(t, out.x)
        return RowSolution(U, peak, out.x) if (U, peak_mib(peak)) <= (sol.U, peak_mib(sol.peak_kib)) else sol

    # ------------------------------------------------------------------ the space
    def best(self, cap: int, k: int = 1, upper_bound: Optional[int] = None, stream: bool = False,
             seeds: Sequence[int] = ()) -> SearchOutcome:
        """The ``k`` best distinct choices (each with its best assignment) under ``cap``, U ≤ ``upper_bound``.
        ``seeds``: choices solved first, as probes are (a plan early, so the bounds prune from the start: the layer
        bound is on once a plan is known); the search stays exact, a seed only adds a solution."""
        P = self.p
        seeds = list(seeds)
        kbest: list[int] = []  # max-heap (negated) of the k least U found
        solved: list[tuple[int, int, RowSolution]] = []  # (U, choice, solution) of every choice solved in reach
        queue = SearchQueue(P, cap)  # candidates by their best known bound (:meth:`_tighten`, solver/search_queue.py)
        unresolved, complete, best_U = float("inf"), True, None  # (least bound of what a time-out left unsolved)
        probes: list[tuple[float, int]] = []  # (mean-unit bound, choice) of the choices bounded so far, for probing
        done: set[int] = set()  # choices solved (by a probe or in order): never solved twice
        bounded = 0
        while queue:
            bound, level, i = queue.peek()
            limit = _limit(kbest, k, upper_bound)
            if limit is not None and bound > limit:
                break
            probe = bool(seeds) or (not solved and bounded >= PROBE_EVERY and bool(probes))
            if probe:  # no plan yet after many bounds: solve the most promising choice bounded so far (anytime)
                bound, i = (float(P.quick_lb[seeds[0]]), seeds.pop(0)) if seeds else heapq.heappop(probes)
                level = SOLVE
            elif level == 0 and solved:  # a plan known: the next quick-bounded candidates' layer bounds at once
                if not self._layer_chunk(queue, limit, done):
                    complete, unresolved = False, min(unresolved, queue.least(bound))
                    break
                continue
            else:
                queue.pop()
            if i in done:  # solved already (a probe's or a seed's): the next candidate at once
                continue
            try:
                if self._stop():
                    raise TimeUp()
                if level < SOLVE:  # a tighter bound first (_tighten); the choice is solved at level SOLVE
                    bounded += self._tighten(i, level, bound, cap, queue, probes)
                    continue
                if probe:
                    if not np.isfinite(self.relaxed_without_exposure(i, cap)):  # nothing fits: done unsolved,
                        done.add(i)  # and the next candidate at once
                        continue
                    bounded = 0
                sol = self.solve_choice(i, cap, cutoff=None if probe else limit)
                done.add(i)
            except OverBudget:  # this choice's structures do not fit the memory budget: left unsolved, bound kept
                if not probe:  # a probed choice is still queued: its own turn decides
                    complete, unresolved = False, min(unresolved, bound)
                continue
            except TimeUp:
                complete, unresolved = False, min(unresolved, bound, queue.least(bound))  # a probe's may not be least
                break
            if sol is None:
                continue
            solved.append((sol.U, i, sol))
            _keep_k_least(kbest, k, sol.U)
            if stream and self.on_solution is not None and (best_U is None or sol.U < best_U):
                best_U = sol.U
                self._stream(i, sol, min(bound, queue.least(bound)))  # the least bound of what is left
        return self._outcome(self._rank(solved, k, cap), complete, unresolved)

    def _layer_chunk(self, queue: SearchQueue, limit: Optional[float], done: set[int]) -> bool:
        """The queue's next quick-bounded candidates to their layer bounds (SearchQueue.layer_chunk: level 0 with a plan
        known); False, nothing taken, past the deadline or on cancellation."""
        if self._stop():
            return False
        try:
            queue.layer_chunk(limit, done)
        except TimeUp:
            return False
        return True

    def _stream(self, i: int, sol: RowSolution, least_left: float) -> None:
        """A better plan to ``on_solution``: choice ``i``'s evaluation at ``sol``, its step time and the least bound of
        the search so far (``least_left``, the least bound of what is left, at most the plan's)."""
        P = self.p
        self.on_solution(P.evaluation(i, sol.x), P.scale.seconds(sol.U), P.scale.seconds(int(min(least_left, sol.U))))

    def _outcome(self, found: list[Found], complete: bool, unresolved: float) -> SearchOutcome:
        """The search's answer: run to the end, OPTIMAL (the best U its bound) or INFEASIBLE; cut short, FEASIBLE or
        UNKNOWN, bounded by the least of the best U and ``unresolved`` (the least bound left unsolved)."""
        if complete:
            status = "OPTIMAL" if found else "INFEASIBLE"
            bound = float(found[0].U) if found else None
        else:
            status = "FEASIBLE" if found else "UNKNOWN"
            bound = min(unresolved, float(found[0].U)) if found else (unresolved if np.isfinite(unresolved) else None)
        return SearchOutcome(status, found, bound, self.solved)

    def _tighten(self, i: int, level: int, bound: float, cap: int, queue: SearchQueue, probes: list) -> int:
        """Choice ``i``'s next bound, queued at the next level; 1 where it was the mean-unit bound (the probes
        count those), else 0. Level ≤ 1 (level 0 while no plan is known; once one is, the queue takes the level-0
        candidates to level 1 by their layer bound, SearchQueue.layer_chunk): the table's mean-unit bound (no
        recompute, perfect balance) from the costs alone, over the quick bound alone (the layer bound is at most
        it); level 2: the continuous relaxation, memory and recomputation included, of
        the table without its paired exposure (the cheaper part of a DualPipe table), level 3: with it (skipped where
        the choice leaves none exposed: the same table)."""
        P = self.p
        if level <= 1:
            mean = max(float(P.quick_lb[i]), P.mean_bound(i))
            queue.push((mean, 2, i))
            heapq.heappush(probes, (mean, i))
            return 1
        if level == 2 and P.exposed(i):  # the relaxation without the exposure first (the table's cheaper part)
            lb = max(float(P.quick_lb[i]), self.relaxed_without_exposure(i, cap))
            if np.isfinite(lb):  # infinite: nothing fits, with the exposure neither
                queue.push((max(bound, lb), 3, i))
            return 0
        lb = self.bound(i, cap)
        if np.isfinite(lb):
            queue.push((max(bound, lb), SOLVE, i))
        return 0

    def _rank(self, solved: list[tuple[int, int, RowSolution]], k: int, cap: int) -> list[Found]:
        """The k best of the solved choices: U, then each one's least peak (whole MiB), then the choice index.
        Least peaks are computed only for the choices within the k-th U (ties included)."""
        if not solved:
            return []
        kth = sorted(U for U, _, _ in solved)[min(k, len(solved)) - 1]
        ranked = []
        for U, i, sol in sorted((c for c in solved if c[0] <= kth), key=lambda c: (c[0], c[1])):
            try:
                sol = self.least_peak(i, cap, sol)
            except (TimeUp, OverBudget):  # out of time (or memory) for the tie-break: the step times stay proven,
                pass  # the peak is this plan's
            ranked.append((U, peak_mib(sol.peak_kib), i, sol))
        ranked.sort(key=lambda r: (r[0], r[1], r[2]))
        return [Found(i, sol.x, U, sol.peak_kib) for U, _, i, sol in ranked[:k]]

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
        out = self.best(cap, 1, upper_U)
        if out.status in ("FEASIBLE", "UNKNOWN") and not out.found:
            raise TimeUp()
        return bool(out.found)


def best_plans(spec, method: Method, controls: SolverControls, *, options=None,
               cap_kib: Optional[int] = None, top_k: int = 1,
               deadline: Optional[float] = None) -> tuple[Problem, SearchOutcome]:
    """The ``top_k`` best plans of one space (GPU count, options, memory cap): the one search the frontiers and
    the explanations repeat over GPU counts (``spec.at_gpus(n)``) and relaxed options."""
    problem = Problem.build(spec, options=options, deadline=deadline)
    return problem, Searcher(problem, method, controls, deadline).best(cap_kib or problem.cap_kib, top_k)
