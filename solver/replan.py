"""Replan a running job on a changed cluster (issue 43): the plan of least effective step time
``J = s · T / (T − R)`` (costmodel/memory/reshard.py), with its proof, the "keep TP/PP, change DP" move, and the
frontier of step time against reconfiguration time.

The search reuses the step-time search (solver/search.py) and re-ranks. Let ``R_min`` be the least
reconfiguration time of any legal choice (R depends on a choice's degrees only, so it is computed for every
choice of the space) and ``J_ref`` the best J known (the fastest plan's, the keep move's). Any plan ``p`` with
step time ``s(p) > s_lim = J_ref · (T − R_min) / T`` has ``J(p) ≥ s(p) · T / (T − R_min) > J_ref``: it cannot win.
So every choice with step time ≤ ``s_lim`` is solved (``Searcher.best`` with ``upper_bound``; each choice at its
least step time, which is also its least J as R does not depend on the stage split), and the least J among them is
the optimum (no second search when the fastest plan already moves at ``R_min``: then its J is least). Cut short
by the deadline, the answer is FEASIBLE with the bound ``min(J_ref, b · T / (T − R_min))``,
``b`` the least step-time bound left unsolved.
"""

from __future__ import annotations

import math
import time
from typing import Optional

from ortools import __version__ as ORTOOLS_VERSION
from pydantic import BaseModel, ConfigDict

from parplan.costmodel.evaluation.choice import nvlink_domain_size
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.evaluation.legality import choice_violations, stage_violations
from parplan.costmodel.memory.reshard import ReshardAssumptions, effective_step_time_s, reconfiguration
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.deadline import TimeUp, call_limits
from parplan.solver.frontier import timing
from parplan.solver.problem import Problem
from parplan.solver.result import SolveStats, Status, Timing
from parplan.solver.search import Method, Searcher

# the window's slack over the integer units' rounding (solver/tables.py Scale: U and the float step time differ by
# < 1e-6 relative on the README example; 1e-4 keeps the window a superset)
WINDOW_SLACK = 1e-4


class ReplanPoint(BaseModel):
    """One candidate plan and what moving to it costs."""

    model_config = ConfigDict(extra="forbid")
    evaluation: Evaluation
    step_time_s: float
    reconfiguration_s: float
    resharded_bytes: float  # read back from the checkpoint store
    peer_bytes_per_gpu: float  # copied between GPUs
    moved_classes: list[str]  # state classes whose partition changed
    effective_step_time_s: float  # J = s · T / (T − R)
    keeps_layout: bool  # the old TP, CP, PP, VPP, EP, ETP and ZeRO stage (only DP changed)


class ReplanResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Status
    horizon_s: float
    best: Optional[ReplanPoint] = None  # least J
    fastest: Optional[ReplanPoint] = None  # least step time (what Plan alone would answer)
    keep: Optional[ReplanPoint] = None  # the old layout with DP changed, always considered
    keep_reason: Optional[str] = None  # why there is no keep point
    frontier: list[ReplanPoint] = []  # step time vs reconfiguration time, non-dominated
    candidates: int = 0  # choices solved in the window
    stats: SolveStats
    assumptions: ReshardAssumptions
    timing: Optional[Timing] = None


LAYOUT = ("tp", "cp", "pp", "vpp", "ep", "etp", "zero_stage")


def keep_plan(old: Plan, spec: Spec) -> tuple[Optional[Plan], Optional[str]]:
    """The old plan with DP scaled to the new GPU count, or why it cannot be."""
    n, mp = spec.cluster.num_gpus, old.tp * old.cp * old.pp
    if n % mp:
        return None, f"{n} GPUs are not a multiple of TP·CP·PP = {mp}"
    dp = n // mp
    gbs = spec.training.global_batch_size
    if gbs % (dp * old.micro_batch_size):
        return None, f"global_batch_size {gbs} is not a multiple of DP {dp} × micro_batch_size {old.micro_batch_size}"
    return old.model_copy(update={"dp": dp, "num_microbatches": gbs // (dp * old.micro_batch_size)}), None


def replan(spec: Spec, old: Plan, *, lost_gpus: int, added_gpus: int, horizon_s: float,
           assumptions: Optional[ReshardAssumptions] = None, method: Method = "cpsat",
           controls: Optional[SolverControls] = None) -> ReplanResult:
    """The best plan on ``spec``'s cluster (the new one) for a job now running ``old``; see the module docstring."""
    t0 = time.perf_counter()
    controls = controls or SolverControls()
    a = assumptions or ReshardAssumptions()
    deadline = t0 + controls.time_limit_s
    with call_limits(deadline, controls.cancel, controls.memory_budget_mib):
        return _replan(spec, old, lost_gpus, added_gpus, horizon_s, a, method, controls, t0, deadline)


def _replan(spec, old, lost_gpus, added_gpus, horizon_s, a, method, controls, t0, deadline) -> ReplanResult:
    problem = Problem.build(spec, deadline=deadline, cancel=controls.cancel)
    arch, gpn = problem.arch, spec.cluster.gpus_per_node
    bw = problem.gpu.inter_node_bandwidth_gbps
    memo: dict[tuple, object] = {}

    def move(new):
        key = tuple(getattr(new, f) for f in LAYOUT) + (new.dp, new.zero_replicas)
        if key not in memo:
            memo[key] = reconfiguration(arch, old, new, lost_gpus=lost_gpus, added_gpus=added_gpus,
                                        gpus_per_node=gpn, network_gbps_per_gpu=bw, a=a)
        return memo[key]

    def point(e: Evaluation) -> ReplanPoint:
        r = move(e.plan)
        s = e.metrics.step_time_s
        return ReplanPoint(evaluation=e, step_time_s=s, reconfiguration_s=r.time_s, resharded_bytes=r.storage_bytes,
                           peer_bytes_per_gpu=r.peer_bytes_per_gpu, moved_classes=list(r.moved_classes),
                           effective_step_time_s=effective_step_time_s(s, r.time_s, horizon_s),
                           keeps_layout=all(getattr(e.plan, f) == getattr(old, f) for f in LAYOUT))

    r_min = min((move(c).time_s for c in problem.choices), default=math.inf)
    keep, keep_reason = _keep(spec, problem, old, point)
    searcher = Searcher(problem, method, controls, deadline)
    cap = problem.cap_kib
    status, points, bound_J = "UNKNOWN", [], None
    try:
        first = searcher.best(cap, 1)
        known = [point(problem.evaluation(f.row_index, f.x)) for f in first.found] + ([keep] if keep else [])
        j_ref = min((p.effective_step_time_s for p in known), default=math.inf)
        if first.status == "INFEASIBLE" and keep is None:
            status = "INFEASIBLE"
        elif known and known[0].reconfiguration_s <= r_min and math.isfinite(j_ref):
            # the fastest plan moves at the least cost any choice can: J(p) ≥ s* · T / (T − R_min) = its J for all p
            points, status = known, first.status
            if first.status != "OPTIMAL" and first.bound is not None:
                bound_J = problem.scale.seconds(int(first.bound)) * horizon_s / (horizon_s - r_min)
        elif math.isfinite(j_ref) and r_min < horizon_s:
            s_lim = j_ref * (horizon_s - r_min) / horizon_s * (1 + WINDOW_SLACK)
            window = searcher.best(cap, max(1, len(problem.choices)), upper_bound=int(
                math.ceil(problem.scale.objective_of_seconds(s_lim))))
            points = [point(problem.evaluation(f.row_index, f.x)) for f in window.found]
            status = "OPTIMAL" if window.status in ("OPTIMAL", "INFEASIBLE") else "FEASIBLE"
            if window.status != "OPTIMAL" and window.bound is not None:
                bound_J = problem.scale.seconds(int(window.bound)) * horizon_s / (horizon_s - r_min)
        else:  # no plan completes a step before the next change: the fastest plan, nothing to prove
            points, status = known, "FEASIBLE" if known else first.status
    except TimeUp:
        status = "FEASIBLE" if points else "UNKNOWN"
    return _result(status, points, keep, keep_reason, bound_J, horizon_s, a, method, controls, problem, searcher, t0)


def _keep(spec: Spec, problem: Problem, old: Plan, point) -> tuple[Optional[ReplanPoint], Optional[str]]:
    """The "keep TP/PP, change DP" move as a point (``point`` prices it), or why it is impossible."""
    kp, keep_reason = keep_plan(old, spec)
    if kp is None:
        return None, keep_reason
    c = kp.to_choice()  # the rules first: the evaluator prices legal plans only (an EP past TP·CP·DP divides by 0)
    rules = choice_violations(spec, c, problem.assumptions, nvlink_domain_size(spec, problem.gpu)) + \
        stage_violations(spec, c, kp.stage_layers, kp.recompute_layers, kp.pipeline_layout)
    e = problem.evaluate(kp) if not rules else None
    if e is None:
        return None, "the old layout breaks a rule on the new cluster: " + "; ".join(rules)
    if not e.feasible:
        return None, "the old layout does not fit: " + "; ".join(e.violations)
    return point(e), keep_reason


def _result(status, points, keep, keep_reason, bound_J, horizon_s, a, method, controls, problem, searcher,
            t0) -> ReplanResult:
    """The answer: the best (least J) and fastest of the points and the keep move, the proof's value, bound and gap."""
    pool = points + ([keep] if keep else [])
    best = min(pool, key=lambda p: (p.effective_step_time_s, p.step_time_s, p.reconfiguration_s), default=None)
    fastest = min(pool, key=lambda p: (p.step_time_s, p.reconfiguration_s), default=None)
    value = best.effective_step_time_s if best is not None and math.isfinite(best.effective_step_time_s) else None
    if status == "OPTIMAL":
        bound_J = value
    elif value is not None and bound_J is not None:
        bound_J = min(bound_J, value)
    gap = max(0.0, (value - bound_J) / value) if value and bound_J is not None else None
    stats = SolveStats(method=method, choices_total=len(problem.choices), choices_searched=searcher.solved,
                       objective_value=value, best_bound=bound_J, gap=gap,
                       workers=1 if controls.deterministic else controls.workers, seed=controls.seed,
                       deterministic=controls.deterministic, ortools_version=ORTOOLS_VERSION)
    return ReplanResult(status=status, horizon_s=horizon_s, best=best, fastest=fastest, keep=keep,
                        keep_reason=None if keep else keep_reason, frontier=frontier(pool), candidates=len(points),
                        stats=stats, assumptions=a, timing=timing(controls, t0))


def frontier(points: list[ReplanPoint]) -> list[ReplanPoint]:
    """The points no other beats on both step time and reconfiguration time, by step time."""
    out: list[ReplanPoint] = []
    for p in sorted(points, key=lambda p: (p.step_time_s, p.reconfiguration_s)):
        if not out or p.reconfiguration_s < out[-1].reconfiguration_s:
            out.append(p)
    return out


__all__ = ["ReplanPoint", "ReplanResult", "replan", "keep_plan", "frontier"]
