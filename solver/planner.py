"""The planner: search the space with CP-SAT (or the exact per-choice oracle), re-evaluate every answer.

``optimize(spec)`` is the one entry point the CLI, the service and embedding code call. Its time limit bounds
the whole call: the search gets its share first (all of it, or 70 % when a frontier is asked for); a
frontier or an explanation gets what is left, and each stops at the deadline with what it has.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

from ortools import __version__ as ORTOOLS_VERSION

from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.evaluation.prediction_band import band_source, memory_band_ratio, upper_first, with_memory_band
from parplan.costmodel.errors import ArgumentError
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.completion import completed_fields, explanation_names, pinned_spec
from parplan.solver.explain import explain
from parplan.solver.arguments import check_optimize_arguments
from parplan.solver.frontier import gpu_frontier, memory_frontier, min_gpus, timing
from parplan.solver.deadline import TimeUp, call_limits
from parplan.solver.gc_pause import gc_paused
from parplan.solver.problem import Problem
from parplan.solver.pools.planner import optimize_on_pools, several_pools
from parplan.solver.result import PlanResult, SolveStats
from parplan.solver.search import MIB_KIB, Method, SearchOutcome, Searcher
from parplan.solver.tie_break import break_ties

SEARCH_SHARE_WITH_FRONTIER = 0.7


def stats_of(method: str, problem: Problem, outcome: SearchOutcome, controls: SolverControls) -> SolveStats:
    seconds = problem.scale.seconds
    value = seconds(outcome.found[0].U) if outcome.found else None
    bound = seconds(int(outcome.bound)) if outcome.bound is not None else None
    gap = None
    if value is not None and bound is not None and value > 0:
        gap = max(0.0, (value - bound) / value)
    return SolveStats(method=method, choices_total=len(problem.choices),
                      choices_searched=outcome.searched, objective_value=value, best_bound=bound, gap=gap,
                      workers=1 if controls.deterministic else controls.workers, seed=controls.seed,
                      deterministic=controls.deterministic, ortools_version=ORTOOLS_VERSION)


def optimize(spec: Spec, *, method: Method = "cpsat", top_k: int = 1, pareto: Optional[str] = None,
             controls: Optional[SolverControls] = None,
             on_solution: Optional[Callable[[Evaluation, float, float], None]] = None,
             seeds: Sequence[Plan] = ()) -> PlanResult:
    """Best plans for the spec's objective; Pareto frontier on request; an explanation if nothing fits.
    ``seeds``: plans of another search (e.g. under another framework: frameworks/compare.py) whose choices, where
    this spec's space has them, are solved first: an early incumbent for the bounds, the same exact answer."""
    t0 = time.perf_counter()
    controls = controls or SolverControls()
    check_optimize_arguments(top_k=top_k, method=method, pareto=pareto, time_limit_s=controls.time_limit_s,
                             workers=controls.workers, seed=controls.seed, deterministic=controls.deterministic,
                             memory_budget_mib=controls.memory_budget_mib)
    deadline = t0 + controls.time_limit_s
    given = spec
    # search.memory_band: the band's margin where none is set; a partial plan's set fields become pins
    # (solver/completion.py)
    spec = pinned_spec(with_memory_band(spec))
    # every loop of the call (space, bounds, tables, searches, frontier, explanation) checks this deadline, the
    # cancel event and the memory budget (solver/deadline.py), whatever phase deadline it was handed; the cyclic
    # garbage collector is paused meanwhile (solver/gc_pause.py)
    with call_limits(deadline, controls.cancel, controls.memory_budget_mib), gc_paused():
        if several_pools(spec):  # issue 21: each stage on one pool (solver/pools/planner.py)
            result = optimize_on_pools(spec, method=method, top_k=top_k, pareto=pareto, controls=controls, t0=t0)
        else:
            result = _optimize(spec, method, top_k, pareto, controls, on_solution, t0, deadline, seeds,
                               memory_band_ratio(given))
    if given.plan is not None:
        result.completed = completed_fields(given.plan)
        if result.explanation is not None:
            _name_plan_pins(result, explanation_names(given))
    if spec.search.memory_margin_gib > 0:
        result.memory_margin_gib = spec.search.memory_margin_gib
    result.band_source = band_source(given)  # the bands of the answers (left out of model_dump: solver/result.py)
    if result.band_source.rank_by == "upper":
        result.plans = upper_first(result.plans, result.band_source)
    return result


def _name_plan_pins(result: PlanResult, names: dict[str, str]) -> None:
    """The explanation names a partial plan's pins as the plan fields the user set (``plan.tp``), not as the
    search restrictions that carried them."""
    ex = result.explanation
    rename = lambda r: names.get(r, r)  # noqa: E731
    ex.conflicting = [rename(r) for r in ex.conflicting]
    for r in ex.relaxations:
        if r.requirement in names:
            field = names[r.requirement]
            value = getattr(r.plan.plan, field.split(".", 1)[1], None) if r.plan is not None else None
            if value is not None:
                r.change = f"{field}: {value} instead (or leave it out of plan: to have it chosen)"
                r.patch = {field: value}
            else:
                r.change = f"leave {field} out of plan: to have it chosen"
                r.patch = {field: None}
            r.requirement = field
    for old, new in names.items():
        ex.summary = ex.summary.replace(old, new)


def _optimize(spec: Spec, method: Method, top_k: int, pareto: Optional[str], controls: SolverControls,
              on_solution: Optional[Callable[[Evaluation, float, float], None]], t0: float,
              deadline: float, seeds: Sequence[Plan] = (), band_ratio: Optional[float] = None) -> PlanResult:
    if spec.objective == "min_gpus":
        if pareto is not None:
            raise ArgumentError("pareto", "is not available with objective min_gpus (the answer is one GPU count)",
                                pareto)
        return min_gpus(spec, method=method, top_k=top_k, controls=controls, t0=t0, deadline=deadline)
    try:
        problem = Problem.build(spec, deadline=deadline, cancel=controls.cancel)
    except TimeUp:
        return PlanResult(status="UNKNOWN", objective=spec.objective, stats=SolveStats(
            method=method, choices_total=0, choices_searched=0,
            workers=controls.workers, seed=controls.seed, deterministic=controls.deterministic,
            ortools_version=ORTOOLS_VERSION), timing=timing(controls, t0))
    search_deadline = t0 + controls.time_limit_s * (SEARCH_SHARE_WITH_FRONTIER if pareto else 1.0)
    s = Searcher(problem, method, controls, search_deadline, on_solution)
    cap = problem.cap_kib
    if spec.objective == "min_memory":
        try:
            peak = s.min_peak()
            outcome = s.best(cap if peak is None else peak * MIB_KIB, top_k, stream=True)
        except TimeUp:
            outcome = s.best(cap, top_k, stream=True)  # out of time: the fastest plans known, not proven least memory
            outcome.status = "FEASIBLE" if outcome.found else "UNKNOWN"
    else:
        seeded = dict.fromkeys(i for i in map(problem.index_of, seeds) if i is not None)  # in order, once each
        outcome = s.best(cap, top_k, stream=True, seeds=list(seeded))
    plans = break_ties([problem.evaluation(f.row_index, f.x) for f in outcome.found], problem.evaluate,
                       spec.objective, problem.options.stage_split)  # tied DualPipe splits: the shortest step order
    phases = {"search_s": time.perf_counter() - t0}
    result = PlanResult(status=outcome.status, objective=spec.objective, plans=plans,
                        stats=stats_of(method, problem, outcome, controls))
    if pareto and plans:
        t1 = time.perf_counter()
        if pareto == "memory":
            # the sweep re-solves each choice at many caps: the exact oracle does that ~5x faster than a CP-SAT
            # model per cap, on the same integer model (benchmarks/solver_speed.py: 70B/64 H100 1.7 s vs 9.5 s)
            result.pareto = memory_frontier(Searcher(problem, "exhaustive", controls, deadline))
        else:
            result.pareto = gpu_frontier(spec, method=method, controls=controls, deadline=deadline)
        result.pareto_axis = pareto
        phases["frontier_s"] = time.perf_counter() - t1
    if result.status == "INFEASIBLE":
        t1 = time.perf_counter()
        result.explanation = explain(spec, problem, method=method, controls=controls, deadline=deadline,
                                     band_ratio=band_ratio)
        phases["explanation_s"] = time.perf_counter() - t1
    result.timing = timing(controls, t0, **phases)  # None in deterministic mode (byte-identical output)
    return result

