"""``optimize`` on a cluster of several pools (issue 21): the stage → pool search as a :class:`PlanResult`.

``solver/planner.py: optimize`` hands a spec with more than one ``cluster.pools`` entry here. ``method='cpsat'``
runs the CP-SAT stage → pool model (``solver/pools/cpsat.py``: OPTIMAL with CP-SAT's proof per choice and the
bounds of the choices skipped), ``'exhaustive'`` the exact search (``solver/pools/space.py``, by branch and bound:
``solver/pools/bnb.py``). What stays unsupported is refused as bad input naming the field (exit 2 /
INVALID_ARGUMENT): the memory frontier, the
``min_memory`` objective, and a framework outside ``costmodel/evaluation/pools.py: POOL_FRAMEWORKS``
(megatron-core, megatron-bridge; ``any`` is the research space). Under one of those the plan keeps its rules: the
space is narrowed by the profile as on one pool (1F1B, no ZB-H1; its stage split and recompute counts).
``--pareto gpus`` adds the frontier of step time against the GPUs of each pool and ``objective: min_gpus`` reads
the least GPUs meeting the target off it (``solver/pools/frontier.py``; the CP-SAT model whatever ``method``).
"""

from __future__ import annotations

import time
from typing import Optional

from ortools import __version__ as ORTOOLS_VERSION

from parplan.costmodel.errors import ArgumentError
from parplan.costmodel.evaluation.pools import PoolPlanError, require_pool_framework, spec_pools
from parplan.costmodel.spec.spec import Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.deadline import TimeUp
from parplan.solver.frontier import target_step_s, timing
from parplan.solver.pools.search import search_pools_until
from parplan.solver.pools.explain import placement_lines
from parplan.solver.pools.choice_model import PoolModelError
from parplan.solver.pools.cpsat import PoolSearch, PoolSearchStats, optimize_pools
from parplan.solver.pools.frontier import pool_frontier
from parplan.solver.result import Explanation, PlanResult, SolveStats


def several_pools(spec: Spec) -> bool:
    return spec.cluster.pools is not None and len(spec.cluster.pools) > 1


def canonical(spec: Spec, plans) -> list:
    """The answers' evaluations, full recompute of zero layers read as ``none`` where ``none`` is searched (the
    same costs; ``solver/problem.py``'s canonical form), a plan that then repeats an earlier one left out."""
    allowed = spec.search.recompute is None or "none" in spec.search.recompute
    out, seen = [], set()
    for p in plans:
        ev = p.evaluation
        if allowed and ev.plan.recompute == "full" and not any(ev.plan.recompute_layers):
            ev = ev.model_copy(update={"plan": ev.plan.model_copy(update={"recompute": "none"})})
        key = ev.plan.model_dump_json()
        if key not in seen:
            seen.add(key)
            out.append(ev)
    return out


def check_pools_request(spec: Spec, pareto: Optional[str]) -> None:
    require_pool_framework(spec)
    if pareto not in (None, "gpus"):
        raise ArgumentError("pareto", "memory is not available on several cluster.pools yet (issue 21); "
                                      "--pareto gpus gives step time against the GPUs of each pool", pareto)
    if spec.objective == "min_gpus" and pareto is not None:
        raise ArgumentError("pareto", "is not available with objective min_gpus (the answer is one GPU count)",
                            pareto)
    if spec.objective == "min_memory":
        raise PoolPlanError(f"objective: {spec.objective} on several cluster.pools is not planned yet; "
                            f"use max_throughput or min_gpus")


def _frontier_stats(method: str, controls: SolverControls, st: PoolSearchStats,
                    value: Optional[float]) -> SolveStats:
    return SolveStats(method=method, choices_total=st.choices_total, choices_searched=st.choices_solved,
                      objective_value=value, workers=1, seed=controls.seed, deterministic=controls.deterministic,
                      ortools_version=ORTOOLS_VERSION)


def min_gpus_on_pools(spec: Spec, *, method: str, top_k: int, controls: SolverControls, t0: float) -> PlanResult:
    """``objective: min_gpus`` on pools: the frontier's points meeting the target, fewest GPUs first
    (``solver/pools/frontier.py: least_gpus``; the CP-SAT stage → pool model whatever ``method``)."""
    target_s = target_step_s(spec)
    left = max(0.001, controls.time_limit_s - (time.perf_counter() - t0))
    front = pool_frontier(spec, time_limit_s=left, seed=controls.seed, cancel=controls.cancel)
    meets = sorted((p for p in front.points if p.key[0] <= target_s),
                   key=lambda p: (sum(p.gpus_per_pool), p.key[0]))[:top_k]
    proven = front.stats.proven
    value = float(sum(meets[0].gpus_per_pool)) if meets else None
    status = ("OPTIMAL" if proven else "FEASIBLE") if meets else ("INFEASIBLE" if proven else "UNKNOWN")
    result = PlanResult(status=status, objective="min_gpus", plans=canonical(spec, meets),
                        stats=_frontier_stats(method, controls, front.stats, value))
    if status == "INFEASIBLE":
        key = "target_step_time_s" if spec.target_step_time_s is not None else "target_tokens_per_s"
        fastest = min((p.key[0] for p in front.points), default=None)
        result.explanation = Explanation(
            summary=f"no plan on the {len(spec_pools(spec))} pools meets a step time of {target_s:.3g} s"
                    + (f" (the fastest takes {fastest:.3g} s)" if fastest is not None else ""),
            conflicting=[key, "cluster.pools"], rejected_choices={})
    result.timing = timing(controls, t0, search_s=time.perf_counter() - t0)
    return result


def optimize_on_pools(spec: Spec, *, method: str, top_k: int, pareto: Optional[str], controls: SolverControls,
                      t0: float) -> PlanResult:
    check_pools_request(spec, pareto)
    if spec.objective == "min_gpus":
        return min_gpus_on_pools(spec, method=method, top_k=top_k, controls=controls, t0=t0)
    left = max(0.001, controls.time_limit_s - (time.perf_counter() - t0))
    if method == "exhaustive":
        counts = [0, 0]  # choices, choices searched (the others cut by their bound)
        plans, complete = search_pools_until(spec, top_k=top_k, deadline=time.perf_counter() + left,
                                             cancel=controls.cancel, counts=counts)
        search = PoolSearch(plans=plans, stats=PoolSearchStats(
            choices_total=counts[0], choices_solved=counts[1],
            proven=complete, best_bound_s=plans[0].key[0] if plans and complete else None))
    else:
        try:
            search = optimize_pools(spec, top_k=top_k, time_limit_s=left, workers=1, seed=controls.seed,
                                    cancel=controls.cancel)
        except TimeUp:  # a loop of the space or the cost model saw the call's deadline or cancel (solver/deadline.py)
            search = PoolSearch(plans=[], stats=PoolSearchStats(proven=False))
    st = search.stats
    value = search.plans[0].key[0] if search.plans else None
    bound = st.best_bound_s
    gap = max(0.0, (value - bound) / value) if value and bound is not None else None
    stats = SolveStats(method=method, choices_total=st.choices_total, choices_searched=st.choices_solved,
                       objective_value=value, best_bound=bound, gap=gap, workers=1, seed=controls.seed,
                       deterministic=controls.deterministic, ortools_version=ORTOOLS_VERSION)
    result = PlanResult(status=search.status, objective=spec.objective, plans=canonical(spec, search.plans),
                        stats=stats)
    if result.status == "INFEASIBLE":
        pools = spec_pools(spec)
        result.explanation = Explanation(
            summary=f"no plan fits on the {len(pools)} pools: for every choice, some pipeline stage needs more "
                    f"memory than any pool that could hold it, or the stages need more GPUs than the pools give",
            conflicting=["memory", "cluster.pools"], rejected_choices={})
    search_s = time.perf_counter() - t0
    if result.plans:  # why each stage sits where it does; an idle pool's best use gets at most 10 s to be priced
        idle_s = min(10.0, max(0.5, controls.time_limit_s - search_s))
        try:
            result.placement = placement_lines(spec, result.plans[0], idle_time_limit_s=idle_s)
        except TimeUp:
            result.placement = placement_lines(spec, result.plans[0], idle_time_limit_s=None)
        except PoolModelError as err:  # --method exhaustive on a model the stage -> pool model does not read
            result.placement = [f"no placement explanation: {err}"]
    frontier_s = None
    if pareto == "gpus" and result.plans:  # step time against the GPUs of each pool (solver/pools/frontier.py)
        f0 = time.perf_counter()
        front = pool_frontier(spec, time_limit_s=max(0.001, controls.time_limit_s - (f0 - t0)), seed=controls.seed,
                              cancel=controls.cancel)
        result.pareto, result.pareto_axis = canonical(spec, front.points), "gpus"
        frontier_s = time.perf_counter() - f0
    result.timing = timing(controls, t0, search_s=search_s, frontier_s=frontier_s,
                           explanation_s=time.perf_counter() - t0 - search_s - (frontier_s or 0.0)
                           if result.plans else None)
    return result
