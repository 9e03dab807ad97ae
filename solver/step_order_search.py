"""The search with DualPipe's and DualPipeV's step order as their objective, proven (issue 39 item 1). Not yet the
planner's: exact on small pipelines (tests/solver/test_step_order_search.py: CP-SAT = the oracle = brute force under
it; Mixtral 8x7B's scenarios); on DeepSeek-V3's research space OPTIMAL in about 2x the closed form's time
(benchmarks/step_order_search.py; docs/solver.md).

Objective: a paired plan's step by its step order (``metrics.step_order_step_s``, DP term included), any other
plan's closed form (the search's U). Search, in three parts:

1. today's search (solver/search.py, CP-SAT or the oracle) under the closed form: exact for every non-paired choice,
   and a first incumbent (each found plan re-read by its objective);
2. every paired choice whose lower bound of the step order is below the K-th best objective known, least bound
   first, each bound tightened before the choice is solved (the closed form's quick and layer bounds, then its
   mean-unit bound, over ``1 + β_max/m``, solver/step_order_floor.py ``floor_divisor``; then the relaxation of its
   busy floor): a DualPipe choice with per-stage splits and recompute counts by branch and bound over its rank pairs
   (solver/step_order_branch.py), any other by CP-SAT with path cuts (solver/step_order_cuts.py), or where that leaves
   it open (a fit that needs whole-layer recomputation) and it is small, by :func:`paired_choice_best` (every stage
   split and recompute vector);
3. the K best by objective (ties: the choice's index).

A non-paired choice the first part pruned has a closed-form bound above its K-th best closed form; where re-reading
raised the K-th best above that (a paired plan whose step order is above its closed form), the first part is
repeated for every choice whose closed form may be below the new K-th best, so nothing is lost; a paired choice left
out of part 2 has a step order above the K-th best. So a run to the end is OPTIMAL under the objective; past the
deadline, or with a paired choice left open, FEASIBLE (or UNKNOWN) with the least bound left unsolved.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from parplan.costmodel.evaluation.evaluate import PlanError
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.evaluation.legality import stage_violations
from parplan.costmodel.spec.spec import Plan
from parplan.solver.deadline import TimeUp
from parplan.solver.pools.space import compositions
from parplan.solver.problem import Problem, canonical_plan
from parplan.solver.search import Searcher
from parplan.solver.step_order_branch import solve_dualpipe_choice, takes
from parplan.solver.step_order_cuts import objective_s, solve_paired_choice
from parplan.solver.step_order_floor import busy_mean_bound, floor_divisor

ENUMERATE_SPLITS = 5000  # a choice the cuts leave open is enumerated up to this many stage splits
DIVE_LEAVES = 8  # a DualPipe choice's first search stops past this many leaves (_paired_part)


@dataclass
class StepOrderOutcome:
    status: str  # OPTIMAL | INFEASIBLE | FEASIBLE | UNKNOWN, under the objective (module docstring)
    plans: list[Evaluation]  # the K best, each its choice's best
    bound_s: Optional[float]  # a lower bound of the best objective over the whole space
    paired_solved: int  # paired choices solved (by path cuts, or by enumeration)


def _splits(problem: Problem, i: int) -> Iterator[list[int]]:
    """Choice ``i``'s stage splits the space allows (``stage_split``: even, equal middle stages, or any; DualPipeV's
    rank 0 holds the model's first and last stage, so its other ranks are the middle ones)."""
    c, split = problem.choices[i], problem.options.stage_split
    mid = slice(1, None) if c.schedule.value == "dualpipev" else slice(1, -1)
    for layers in map(list, compositions(problem.num_layers, c.pp)):
        if (split == "even" and len(set(layers)) > 1) or (split == "first_last" and len(set(layers[mid])) > 1):
            continue
        if not stage_violations(problem.spec, c, layers, [0] * c.pp):
            yield layers


def _recompute_vectors(problem: Problem, i: int, layers: list[int]) -> Iterator[list[int]]:
    """Every recompute vector of a split past the no-recompute one (uniform or per stage; 'first_last' middles
    alike), or none where the choice recomputes no whole layers."""
    c, o = problem.choices[i], problem.options
    if c.recompute != "full" or o.recompute_all_layers:
        return iter(())
    if o.uniform_recompute:
        return ([r] * c.pp for r in range(1, min(layers) + 1))
    vectors = itertools.product(*(range(x + 1) for x in layers))
    mid = slice(1, -1)
    return (list(v) for v in vectors if any(v) and (o.stage_split != "first_last" or c.schedule.value == "dualpipe"
                                                    or len(set(v[mid])) <= 1))


def _plan(problem: Problem, i: int, layers: list[int], recompute: list[int]) -> Plan:
    return canonical_plan(problem.choices[i], layers, recompute, problem.options)


def _evaluate(problem: Problem, plan: Plan) -> Optional[Evaluation]:
    try:
        return problem.evaluate(plan)
    except PlanError:
        return None


def paired_choice_best(problem: Problem, i: int, below: float, deadline: Optional[float]) -> Optional[Evaluation]:
    """Choice ``i``'s legal, fitting plan of least objective below ``below`` (None: none), by every stage split and
    recompute vector: a split's no-recompute plan bounds its others from below (recomputing more never shortens an
    operation, so never the longest path) and is their best where it fits; a split none of whose plans fits (every
    layer recomputed does not) is skipped. Raises TimeUp past ``deadline``."""
    best, best_v = None, below
    for layers in _splits(problem, i):
        if deadline is not None and time.perf_counter() > deadline:
            raise TimeUp()
        e0 = _evaluate(problem, _plan(problem, i, layers, [0] * len(layers)))
        if e0 is None or objective_s(e0) >= best_v:
            continue
        candidates = [e0] if e0.feasible else list(_recompute_vectors(problem, i, layers))
        for rec in candidates:
            e = rec if isinstance(rec, Evaluation) else _evaluate(problem, _plan(problem, i, layers, rec))
            if e is not None and e.feasible and objective_s(e) < best_v:
                best, best_v = e, objective_s(e)
    return best


def _paired_solve(P: Problem, i: int, cap: int, below: float, deadline: Optional[float], forms: dict):
    """(best plan below ``below`` or None, exact, a lower bound of the choice): by branch and bound over DualPipe's
    rank pairs (solver/step_order_branch.py) where it takes the choice, else by CP-SAT with path cuts
    (solver/step_order_cuts.py); each starts from the cuts found for choices of the same schedule, depth and
    micro-batch count. Where the cut loop leaves the choice open (whole-layer recompute needed to fit), by
    enumeration if the choice has at most ENUMERATE_SPLITS stage splits, else open with the cuts' bound."""
    c = P.choices[i]
    key = (c.schedule, c.pp, c.num_microbatches)
    out = solve_dualpipe_choice(P, i, cap, below, deadline, forms.setdefault(key, []))
    if out is None or not out.exact:  # (the branch and bound past its limits: the cut loop below its best)
        first = out.best if out is not None else None
        out = solve_paired_choice(P, i, cap, below if first is None else objective_s(first), deadline, forms[key])
        if out.best is None and first is not None:
            out.best = first
    if out.exact:
        return out.best, True, out.bound_s
    if math.comb(P.num_layers - 1, P.choices[i].pp - 1) <= ENUMERATE_SPLITS:
        e = paired_choice_best(P, i, below, deadline)
        return e, True, objective_s(e) if e is not None else below
    return out.best, False, out.bound_s


def _next_bound_s(searcher: Searcher, i: int, cap: int, level: int) -> float:
    """Paired choice ``i``'s next lower bound of its step order, in seconds: level 0, its closed-form mean-unit
    bound over ``floor_divisor``; level 1, the continuous relaxation of its busy floor (Problem.relaxed_bound with
    ``floor``: memory and recomputation included). Infinite where nothing fits."""
    P = searcher.p
    if searcher._stop():
        raise TimeUp()
    if level == 0:
        closed = max(float(P.quick_lb[i]), P.mean_bound(i)) / floor_divisor(P.choices[i], P.assumptions)
        return P.scale.seconds(max(closed, busy_mean_bound(P, i)))
    lb = P.relaxed_bound(i, cap, floor=True)
    return P.scale.seconds(lb) if np.isfinite(lb) else float("inf")


def best_by_step_order(searcher: Searcher, cap: int, k: int = 1) -> StepOrderOutcome:
    """The ``k`` best distinct choices under the objective (module docstring), each with its best plan."""
    P = searcher.p
    first = searcher.best(cap, k)
    by_choice = {f.row_index: P.evaluation(f.row_index, f.x) for f in first.found}
    kth_closed = sorted(f.U for f in first.found)[k - 1] if len(first.found) >= k else None
    if first.status == "OPTIMAL" and kth_closed is not None and \
            P.scale.objective_of_seconds(_kth(by_choice, k)) > kth_closed:
        # a re-read plan's step order above its closed form raised the K-th best: every choice whose closed form
        # may be below it (the closed form is the objective of the non-paired ones)
        more = searcher.best(cap, len(P.choices), upper_bound=int(np.ceil(P.scale.objective_of_seconds(
            _kth(by_choice, k)))))
        for f in more.found:
            by_choice.setdefault(f.row_index, P.evaluation(f.row_index, f.x))
        first = more
    complete, unresolved = first.status in ("OPTIMAL", "INFEASIBLE"), float("inf")
    if not complete and first.bound is not None:
        unresolved = P.scale.seconds(int(first.bound))
    paired = [i for i, c in enumerate(P.choices) if c.schedule.paired and P.quick_mem_kib[i] <= cap]
    lb0 = np.maximum(P.quick_lb[paired].astype(float), P.layer_bounds(paired)) if paired else []
    queue = [(P.scale.seconds(float(b)) / floor_divisor(P.choices[i], P.assumptions), 0, i)
             for i, b in zip(paired, lb0)]
    heapq.heapify(queue)
    solved, open_s = _paired_part(searcher, cap, k, by_choice, queue)
    complete, unresolved = complete and not np.isfinite(open_s), min(unresolved, open_s)
    ranked = sorted(by_choice.items(), key=lambda ie: (objective_s(ie[1]), ie[0]))[:k]
    plans = [e for _, e in ranked]
    if complete:
        return StepOrderOutcome("OPTIMAL" if plans else "INFEASIBLE", plans,
                                objective_s(plans[0]) if plans else None, solved)
    bound = min(unresolved, objective_s(plans[0])) if plans else (unresolved if np.isfinite(unresolved) else None)
    return StepOrderOutcome("FEASIBLE" if plans else "UNKNOWN", plans, bound, solved)


def _paired_part(searcher: Searcher, cap: int, k: int, by_choice: dict, queue: list) -> tuple[int, float]:
    """Part 2 (module docstring) over ``queue`` (lower bound, level, choice): each choice's bounds in turn; at level
    2 a DualPipe choice the branch and bound takes is dived first (DIVE_LEAVES leaves: a plan early, the K-th best
    lowered before any choice is proven; closed there if its search ends) and its full solve deferred until no
    choice left below the K-th best is undived; the deferred ones solved least plan found first (then least bound),
    each while its bound is below the K-th best. ``by_choice`` updated; returns (choices solved, the least lower bound
    left open: infinite where none)."""
    P, solved, forms, deferred = searcher.p, 0, {}, []  # forms: the cuts by (schedule, pp, m), shared
    open_s = float("inf")
    while True:
        kth = _kth(by_choice, k)
        deferred = [d for d in deferred if d[1] < kth]  # (the others: no plan below the K-th best)
        heapq.heapify(deferred)
        dive = bool(queue) and queue[0][0] < kth
        if not dive and not deferred:
            return solved, open_s
        lb, level, i = heapq.heappop(queue) if dive else heapq.heappop(deferred)[1:]
        try:
            if level < 2:  # the next bound (module docstring), the choice queued again
                nxt = _next_bound_s(searcher, i, cap, level)
                if np.isfinite(nxt):
                    heapq.heappush(queue, (max(lb, nxt), level + 1, i))
                continue
            if level == 2 and takes(P, i):
                c = P.choices[i]
                out = solve_dualpipe_choice(P, i, cap, kth, searcher.deadline,
                                            forms.setdefault((c.schedule, c.pp, c.num_microbatches), []), DIVE_LEAVES)
                found = out.best if out is not None else None
                if found is not None and (i not in by_choice or objective_s(found) < objective_s(by_choice[i])):
                    by_choice[i] = found
                if out is None or not out.exact:  # (None: too many options, the full solve by the cut loop)
                    first = objective_s(found) if found is not None else float("inf")
                    deferred.append((first, lb, 3, i))
                    continue
                e, exact, lb_i = out.best, True, out.bound_s
            else:
                e, exact, lb_i = _paired_solve(P, i, cap, kth, searcher.deadline, forms)
        except TimeUp:
            return solved, min([open_s, lb] + [d[1] for d in deferred])
        solved += 1
        if e is not None:
            by_choice[i] = e
        if not exact:
            open_s = min(open_s, lb_i)


def _kth(by_choice: dict[int, Evaluation], k: int) -> float:
    """The K-th least objective known (infinite while fewer are known)."""
    values = sorted(objective_s(e) for e in by_choice.values())
    return values[k - 1] if len(values) >= k else float("inf")
