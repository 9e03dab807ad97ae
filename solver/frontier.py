"""Exact Pareto frontiers (step time vs peak memory, step time vs GPU count) and the min_gpus objective.

Memory frontier: the ε-constraint method with a lexicographic second step (cpsat-modeling.md §2.11):
minimise step time under a memory cap ε; then the least peak memory (MiB) any plan reaches at that step
time; emit the point; set ε just below it; repeat until nothing fits. Every point is non-dominated.
GPU frontier: the best step time at each candidate GPU count, kept where it strictly improves.
"""

from __future__ import annotations

import time
from typing import Optional

from ortools import __version__ as ORTOOLS_VERSION

from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.spec import Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.deadline import TimeUp, past
from parplan.solver.result import Explanation, PlanResult, Relaxation, SolveStats, Timing
from parplan.solver.search import SearchOutcome, Searcher, best_plans
from parplan.solver.tables import MIB_KIB

MAX_POINTS = 200


class _RowCache:
    """Per-choice optima under shrinking memory caps, reused along the frontier sweep.

    A choice's optimum at cap c is still its optimum at any c' < c that it fits under (the feasible set
    only shrank), it is infeasible at every c' < c if it is at c, and its optimum can only get worse as
    the cap shrinks -- so an earlier optimum is also a lower bound.
    """

    def __init__(self, searcher: Searcher):
        self.s = searcher
        self.res: dict[int, tuple[int, Optional[tuple]]] = {}

    def solve(self, i: int, cap: int):
        hit = self.res.get(i)
        if hit is not None:
            c0, r = hit
            if cap == c0 or (cap < c0 and (r is None or r.peak_kib <= cap)):
                return r
        r = self.s.solve_choice(i, cap)
        if hit is None or cap < hit[0]:
            self.res[i] = (cap, r)
        return r

    def bound(self, i: int, lb0: float, cap: int) -> float:
        hit = self.res.get(i)
        if hit is not None and cap <= hit[0]:
            if hit[1] is None:
                return float("inf")
            return max(lb0, hit[1].U)
        return lb0

    def best(self, ranked0: list[tuple[int, float]], cap: int):
        """Minimum U under ``cap`` over all choices (exact; branch and bound on cached bounds)."""
        order = sorted(((self.bound(i, lb, cap), i) for i, lb in ranked0), key=lambda t: (t[0], t[1]))
        best = None
        for b, i in order:
            if best is not None and b > best[0]:
                break
            r = self.solve(i, cap)
            if r is not None and (best is None or (r.U, r.peak_kib, i) < (best[0], best[1], best[2])):
                best = (r.U, r.peak_kib, i, r.x)
        return best

    def min_peak(self, ranked0: list[tuple[int, float]], cap: int, upper_U: int) -> Optional[int]:
        """Least peak (MiB) of any plan with U ≤ upper_U under ``cap``: per choice, bisection on its cap."""
        best_mib = None
        for i, lb in ranked0:
            if self.bound(i, lb, cap) > upper_U:
                continue
            r = self.solve(i, cap)
            if r is None or r.U > upper_U:
                continue
            lo, hi = 0, -(-r.peak_kib // MIB_KIB)  # hi: this choice's own peak, rounded up to MiB
            if best_mib is not None:
                if lo >= best_mib:
                    continue
                hi = min(hi, best_mib)
            while lo < hi:
                mid = (lo + hi) // 2
                rr = self.s.solve_choice(i, mid * MIB_KIB)
                if rr is not None and rr.U <= upper_U:
                    hi = mid
                else:
                    lo = mid + 1
            best_mib = hi if best_mib is None else min(best_mib, hi)
        return best_mib


def memory_frontier(searcher: Searcher) -> list[Evaluation]:
    """Exact frontier of step time vs peak memory (MiB resolution), on the same integer model; past the
    searcher's deadline, the points found so far (each exact)."""
    P = searcher.p
    cap = P.cap_kib
    cache = _RowCache(searcher)
    points: list[Evaluation] = []
    try:
        ranked0 = []
        for i in P.order(cap):
            if searcher._stop():  # the deadline, the call's cancel event
                raise TimeUp()
            lb = searcher.bound(i, cap)
            if lb != float("inf"):
                ranked0.append((i, lb))
        while len(points) < MAX_POINTS and cap > 0:
            best = cache.best(ranked0, cap)
            if best is None:
                break
            U = best[0]
            peak_mib = cache.min_peak(ranked0, cap, U)
            if peak_mib is None:
                break
            at = cache.best(ranked0, min(cap, peak_mib * MIB_KIB))
            U2, _, i, x = at if at is not None else best
            points.append(P.evaluation(i, x))
            cap = (peak_mib - 1) * MIB_KIB
    except TimeUp:
        pass
    return points


def candidate_gpu_counts(spec: Spec, upper: Optional[int] = None) -> list[int]:
    """GPU counts the GPU-axis searches consider: whole nodes times 2^a·3^b·5^c, plus powers of two below a node."""
    node = spec.cluster.gpus_per_node
    upper = upper or spec.search.max_num_gpus or spec.cluster.num_gpus
    smooth = set()
    a = 1
    while a * node <= upper:
        b = a
        while b * node <= upper:
            c = b
            while c * node <= upper:
                smooth.add(c * node)
                c *= 5
            b *= 3
        a *= 2
    small = {2**i for i in range(0, 12) if 2**i < node and 2**i <= upper}
    return sorted(smooth | small)


def _best_at(spec: Spec, n: int, method: str, controls: SolverControls, top_k: int = 1,
             deadline: Optional[float] = None):
    """(problem, outcome) at ``n`` GPUs; an UNKNOWN outcome when the deadline passes while the space is built."""
    try:
        return best_plans(spec.at_gpus(n), method, controls, top_k=top_k, deadline=deadline)
    except TimeUp:
        return None, SearchOutcome("UNKNOWN", [], None, 0)


def gpu_frontier(spec: Spec, method: str = "cpsat", controls: Optional[SolverControls] = None,
                 deadline: Optional[float] = None) -> list[Evaluation]:
    controls = controls or SolverControls()
    points: list[Evaluation] = []
    best_time = None
    for n in candidate_gpu_counts(spec):
        if past(deadline):
            break
        problem, out = _best_at(spec, n, method, controls, deadline=deadline)
        if not out.found:
            continue
        f = out.found[0]
        ev = problem.evaluation(f.row_index, f.x)
        if best_time is None or ev.metrics.step_time_s < best_time:
            points.append(ev)
            best_time = ev.metrics.step_time_s
    return points


def timing(controls: SolverControls, t0: float, **phases: Optional[float]) -> Optional[Timing]:
    """None in deterministic mode: clock readings would break byte-identical output (see Timing)."""
    return None if controls.deterministic else Timing(wall_time_s=time.perf_counter() - t0, **phases)


def _min_gpus_stats(method: str, controls: SolverControls, total: int, searched: int,
                    objective_value: Optional[float] = None) -> SolveStats:
    return SolveStats(method=method, choices_total=total, choices_searched=searched, objective_value=objective_value,
                      workers=controls.workers, seed=controls.seed, deterministic=controls.deterministic,
                      ortools_version=ORTOOLS_VERSION)


def target_step_s(spec: Spec) -> float:
    """The step time to meet: the tighter of ``target_step_time_s`` and the step time of ``target_tokens_per_s``."""
    tokens = spec.training.global_batch_size * spec.training.seq_len
    target_s = spec.target_step_time_s
    if spec.target_tokens_per_s is not None:
        t = tokens / spec.target_tokens_per_s
        target_s = t if target_s is None else min(target_s, t)
    return target_s


def min_gpus(spec: Spec, method: str, top_k: int, controls: SolverControls, t0: float,
             deadline: Optional[float] = None) -> PlanResult:
    """The smallest candidate GPU count whose best plan meets the step-time or tokens/s target (past the
    deadline: UNKNOWN, with the counts tried)."""
    gpu = resolve_gpu(spec.cluster)
    tokens = spec.training.global_batch_size * spec.training.seq_len
    target_s = target_step_s(spec)
    flops = Architecture(spec.model).model_flops_per_token(spec.training.seq_len) * tokens
    peak = gpu.peak_tflops(spec.training.precision) * 1e12
    tried = 0
    undecided = False
    for n in candidate_gpu_counts(spec):
        if flops / (n * peak) > target_s:  # even at 100 % of peak n GPUs cannot meet the target
            continue
        if past(deadline):
            undecided = True
            break
        tried += 1
        problem, out = _best_at(spec, n, method, controls, top_k, deadline=deadline)
        if out.status in ("UNKNOWN", "FEASIBLE"):
            undecided = True
        if not out.found:
            continue
        plans = [problem.evaluation(f.row_index, f.x) for f in out.found]
        if plans[0].metrics.step_time_s <= target_s * (1 + 1e-12):
            stats = _min_gpus_stats(method, controls, len(problem.choices), out.searched, float(n))
            return PlanResult(status="OPTIMAL" if out.status == "OPTIMAL" and not undecided else "FEASIBLE",
                              objective="min_gpus", plans=plans, stats=stats, timing=timing(controls, t0))
    stats = _min_gpus_stats(method, controls, 0, tried)
    if undecided:
        return PlanResult(status="UNKNOWN", objective="min_gpus", stats=stats, timing=timing(controls, t0))
    upper = spec.search.max_num_gpus or spec.cluster.num_gpus
    limit_key = "search.max_num_gpus" if spec.search.max_num_gpus else "cluster.num_gpus"
    target_key = "target_step_time_s" if spec.target_step_time_s is not None else "target_tokens_per_s"
    relaxations = [r for r in (_looser_target(spec, method, controls, deadline, upper, target_key),
                               _more_gpus(spec, method, controls, deadline, upper, limit_key, flops, peak))
                   if r is not None]
    return PlanResult(status="INFEASIBLE", objective="min_gpus", stats=stats, timing=timing(controls, t0),
                      explanation=Explanation(
        summary=f"no GPU count up to {upper} meets a step time of {target_s:.3g} s",
        conflicting=[target_key, limit_key], rejected_choices={}, relaxations=relaxations))


def _looser_target(spec: Spec, method: str, controls: SolverControls, deadline: Optional[float], upper: int,
                   target_key: str) -> Optional[Relaxation]:
    """A looser target: the best step time any GPU count up to the limit reaches (checked: it is that plan)."""
    tokens = spec.training.global_batch_size * spec.training.seq_len
    best = None
    for n in candidate_gpu_counts(spec, upper):
        if past(deadline):
            break
        problem, out = _best_at(spec, n, method, controls, deadline=deadline)
        if out.found:
            ev = problem.evaluation(out.found[0].row_index, out.found[0].x)
            if best is None or ev.metrics.step_time_s < best[1].metrics.step_time_s:
                best = (n, ev)
    if best is None:
        return None
    n, ev = best
    t = ev.metrics.step_time_s * (1 + 1e-9)
    patch = ({"target_step_time_s": t, "target_tokens_per_s": None} if target_key == "target_step_time_s"
             else {"target_tokens_per_s": tokens / t, "target_step_time_s": None})
    return Relaxation(requirement=target_key, patch=patch, plan=ev,
                      change=f"the fastest plan up to {upper} GPUs takes {ev.metrics.step_time_s:.3g} s "
                             f"per step ({tokens / ev.metrics.step_time_s:,.0f} tokens/s) on {n} GPUs")


def _more_gpus(spec: Spec, method: str, controls: SolverControls, deadline: Optional[float], upper: int,
               limit_key: str, flops: float, peak: float) -> Optional[Relaxation]:
    """More GPUs: the smallest count above the limit (up to 8x) whose best plan meets the target
    (``flops`` of one step and one GPU's ``peak`` FLOP/s rule out counts too small even at 100 % of peak)."""
    target_s = target_step_s(spec)
    wider = spec.model_copy(update={"search": spec.search.model_copy(update={"max_num_gpus": 8 * upper})})
    for n in candidate_gpu_counts(wider):
        if n <= upper or flops / (n * peak) > target_s:
            continue
        if past(deadline):
            break
        problem, out = _best_at(wider, n, method, controls, deadline=deadline)
        if out.found:
            ev = problem.evaluation(out.found[0].row_index, out.found[0].x)
            if ev.metrics.step_time_s <= target_s * (1 + 1e-12):
                patch = {"search.max_num_gpus": n} if limit_key == "search.max_num_gpus" else {"cluster.num_gpus": n}
                return Relaxation(requirement=limit_key, patch=patch, plan=ev,
                                  change=f"allow {n} GPUs: the best plan there takes "
                                         f"{ev.metrics.step_time_s:.3g} s per step")
    return None
