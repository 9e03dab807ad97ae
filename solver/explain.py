"""Why nothing fits, and what would.

1. The infeasibility core: the space with every user pin and requirement relaxed, each requirement a
   switch; a deletion filter over exact per-choice feasibility (the same integer model the solver
   uses) shrinks the full requirement set to a minimal conflicting one. (CP-SAT's sufficient
   assumptions, cpsat-modeling.md §2.10, are minimised but not guaranteed minimal, and a model over
   the whole relaxed space is slow to build; this is exact and minimal.)
2. Relaxations: for each requirement of the core, and for GPU count and batch size, the smallest
   concrete change that admits a plan; each is checked by solving the changed request.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

from parplan.costmodel.evaluate import evaluate
from parplan.costmodel.hardware import GIB
from parplan.costmodel.spec import Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.problem import Problem
from parplan.solver.result import Explanation, Relaxation
from parplan.solver.space import SpaceOptions
from parplan.solver.tables import KIB, Row

PIN_FIELDS = ("tp", "cp", "pp", "dp", "ep", "etp", "micro_batch_size", "vpp")


def _requirements(spec: Spec) -> list[str]:
    """The user's restrictions and the memory requirement, as names users can act on."""
    s = spec.search
    req = ["memory"]
    for f in PIN_FIELDS:
        if getattr(s, f) is not None:
            req.append(f"search.{f}")
    for f in ("schedules", "zero_stages", "recompute", "sequence_parallel"):
        if getattr(s, f) is not None:
            req.append(f"search.{f}")
    if not s.uneven_stages:
        req.append("search.uneven_stages")
    if s.uniform_recompute:
        req.append("search.uniform_recompute")
    return req


def _violates(row: Row, spec: Spec, name: str, L: int) -> bool:
    c, s = row.choice, spec.search
    if name in (f"search.{f}" for f in PIN_FIELDS):
        f = name.split(".")[1]
        attr = {"micro_batch_size": "micro_batch_size"}.get(f, f)
        return getattr(c, attr) not in getattr(s, f)
    if name == "search.schedules":
        return c.schedule not in s.schedules
    if name == "search.zero_stages":
        return c.zero_stage not in s.zero_stages
    if name == "search.recompute":
        return c.recompute not in s.recompute
    if name == "search.sequence_parallel":
        return c.sequence_parallel not in s.sequence_parallel
    return False


def _core(spec: Spec, relaxed: Problem, requirements: list[str]) -> list[str]:
    """A minimal set of requirements that together admit no plan (empty if all together admit one).

    Feasibility of a requirement set S is exact: some choice of the relaxed space violates no pin in S
    and, when S holds the memory requirement, has a stage split and recompute counts that fit (solved
    per choice as the exhaustive search does, cached). Deletion filter: drop each requirement whose
    removal leaves the rest infeasible; what remains is a minimal conflicting set.
    """
    from parplan.solver.bounds import lower_bounds
    from parplan.solver.exhaustive import solve_row, splits

    L = relaxed.num_layers
    cap = relaxed.cap_kib
    rows = relaxed.rows
    pins = [r for r in requirements if r.startswith("search.") and r not in ("search.uneven_stages",
                                                                              "search.uniform_recompute")]
    violated = [frozenset(r for r in pins if _violates(row, spec, r, L)) for row in rows]
    lb = lower_bounds(rows, L, cap)
    cache: dict[tuple[int, bool, bool, bool], bool] = {}

    def row_ok(i: int, memory: bool, even: bool, uniform: bool) -> bool:
        key = (i, memory, even, uniform)
        if key not in cache:
            if not memory:
                sp = splits(rows[i], L, uneven=not even)
                cache[key] = len(sp["lf"]) > 0
            elif lb[i] == float("inf"):
                cache[key] = False
            elif (even or uniform) and not row_ok(i, True, False, False):
                cache[key] = False
            else:
                cache[key] = solve_row(rows[i], L, not even, uniform, cap) is not None
        return cache[key]

    def feasible(active: list[str]) -> bool:
        act = set(active)
        memory, even, uniform = "memory" in act, "search.uneven_stages" in act, "search.uniform_recompute" in act
        order = sorted(range(len(rows)), key=lambda i: lb[i])
        return any(not (violated[i] & act) and row_ok(i, memory, even, uniform) for i in order)

    if feasible(requirements):
        return []
    core = list(requirements)
    for r in list(core):
        rest = [q for q in core if q != r]
        if not feasible(rest):
            core = rest
    return core


def _relaxed_options(opts: SpaceOptions, names: list[str]) -> SpaceOptions:
    changes = {}
    for r in names:
        if r.startswith("search."):
            f = r.split(".")[1]
            if f in PIN_FIELDS or f == "sequence_parallel":
                changes[f] = None
            elif f == "schedules":
                changes[f] = ("1f1b", "interleaved", "zb-h1", "dualpipe")
            elif f == "zero_stages":
                changes[f] = (0, 1, 2, 3)
            elif f == "recompute":
                changes[f] = ("none", "selective", "full")
            elif f == "uneven_stages":
                changes[f] = True
            elif f == "uniform_recompute":
                changes[f] = False
    return replace(opts, **changes)


def _best(spec: Spec, method: str, controls: SolverControls, options: Optional[SpaceOptions] = None,
          num_gpus: Optional[int] = None, cap_kib: Optional[int] = None, min_memory: bool = False):
    from parplan.solver.planner import MIB_KIB, _Searcher, best_plans

    if min_memory:
        problem = Problem.build(spec, options=options, num_gpus=num_gpus)
        s = _Searcher(problem, "exhaustive", controls)
        s.p.cap_kib = cap_kib or problem.cap_kib
        peak = s.min_peak()
        if peak is None:
            return problem, None, None
        out = s.best(peak * MIB_KIB, 1)
    else:
        problem, out = best_plans(spec, method, controls, options=options, num_gpus=num_gpus, cap_kib=cap_kib)
    if not out.found:
        return problem, None, None
    f = out.found[0]
    return problem, problem.evaluate(problem.plan(problem.rows[f.row_index], f.x)), f


def explain(spec: Spec, problem: Problem, method: str = "cpsat", controls: Optional[SolverControls] = None) -> Explanation:
    controls = controls or SolverControls()
    usable = problem.cap_kib * KIB / GIB
    requirements = _requirements(spec)
    relaxed_opts = replace(_relaxed_options(problem.options, requirements), prune_dominated=False)
    relaxed = Problem.build(spec, options=relaxed_opts)
    rejected = dict(problem.space.rejected)
    if not relaxed.rows:
        top = sorted(relaxed.space.rejected.items(), key=lambda kv: -kv[1])[:3]
        reasons = "; ".join(f"{k} ({n} choices)" for k, n in top) or "no divisor combination of the GPU count"
        return Explanation(summary=f"no choice of degrees is legal for {spec.cluster.num_gpus} GPUs and a global batch "
                                   f"of {spec.training.global_batch_size}: {reasons}",
                           conflicting=["cluster.num_gpus", "training.global_batch_size"], rejected_choices=rejected,
                           usable_memory_gib=usable,
                           relaxations=_size_relaxations(spec, method, controls))
    core = _core(spec, relaxed, requirements)
    # the least memory any plan needs, with the user's pins kept
    _, min_mem_plan, _ = _best(spec, method, controls, options=problem.options, cap_kib=problem.cap_kib * 64,
                               min_memory=True)
    min_needed = min_mem_plan.metrics.peak_memory_gib if min_mem_plan is not None else None
    relaxations: list[Relaxation] = []
    for r in core:
        if r == "memory":
            if min_mem_plan is not None and min_needed is not None:
                a = problem.assumptions
                need_gib = math.ceil((min_needed + a.memory_reserve_gib) / a.memory_usable_fraction * 10) / 10
                relaxations.append(Relaxation(
                    requirement="memory",
                    change=f"the least memory any plan needs is {min_needed:.1f} GiB per GPU, "
                           f"{min_needed - usable:.1f} GiB more than the {usable:.1f} GiB usable on "
                           f"{spec.cluster.gpu}: a GPU with {need_gib:.1f} GiB (cluster.memory_gib) fits it",
                    patch={"cluster.memory_gib": need_gib},
                    plan=evaluate(_with_memory(spec, need_gib), min_mem_plan.plan)))  # under the relaxed spec
            continue
        opts = _relaxed_options(problem.options, [r])
        _, ev, _ = _best(spec, method, controls, options=opts)
        if ev is not None:
            f = r.split(".", 1)[1]
            patch = {r: True if f == "uneven_stages" else False if f == "uniform_recompute" else None}
            relaxations.append(Relaxation(requirement=r, change=_describe_change(r, ev), patch=patch, plan=ev))
    relaxations += _size_relaxations(spec, method, controls)
    if core == ["memory"]:
        summary = "no plan fits in GPU memory, even with every search restriction lifted"
    elif core:
        summary = (f"no plan satisfies {core[0]}" if len(core) == 1
                   else f"no plan satisfies {', '.join(core)} together")
    else:
        summary = "no plan found within the solver's limits"
    if min_needed is not None and "memory" in core:
        summary += f"; the least memory any allowed plan needs is {min_needed:.1f} GiB per GPU against {usable:.1f} GiB usable"
    return Explanation(summary=summary, conflicting=core, rejected_choices=rejected, min_memory_needed_gib=min_needed,
                       usable_memory_gib=usable, relaxations=relaxations)


def _with_memory(spec: Spec, memory_gib: float) -> Spec:
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"memory_gib": memory_gib})})


def _describe_change(requirement: str, ev) -> str:
    p = ev.plan
    f = requirement.split(".", 1)[1]
    value = {"tp": p.tp, "cp": p.cp, "pp": p.pp, "dp": p.dp, "ep": p.ep, "etp": p.etp,
             "micro_batch_size": p.micro_batch_size, "vpp": p.vpp, "schedules": p.schedule,
             "zero_stages": p.zero_stage, "recompute": p.recompute, "sequence_parallel": p.sequence_parallel,
             "uneven_stages": p.stage_layers, "uniform_recompute": p.recompute_layers}.get(f)
    if f in ("uneven_stages",):
        return f"allow uneven stages (search.uneven_stages: true), e.g. stage_layers {value}"
    if f == "uniform_recompute":
        return f"allow per-stage recompute counts (search.uniform_recompute: false), e.g. {value}"
    return f"allow {f} = {value} in search.{f}"


def _size_relaxations(spec: Spec, method: str, controls: SolverControls) -> list[Relaxation]:
    out: list[Relaxation] = []
    from parplan.solver.frontier import candidate_gpu_counts

    n0 = spec.cluster.num_gpus
    for n in candidate_gpu_counts(spec, upper=8 * n0):
        if n <= n0:
            continue
        try:
            _, ev, _ = _best(spec, method, controls, num_gpus=n)
        except Exception:  # a larger cluster may break a user pin's divisibility; skip it
            ev = None
        if ev is not None:
            out.append(Relaxation(requirement="cluster.num_gpus", change=f"use {n} GPUs ({n - n0:+d})",
                                  patch={"cluster.num_gpus": n}, plan=ev))
            break
    gbs = spec.training.global_batch_size
    for factor in (0.5, 2.0, 0.25, 4.0, 0.125, 8.0):
        g = int(gbs * factor)
        if g < 1 or g == gbs or gbs * factor != g:
            continue
        s2 = spec.model_copy(update={"training": spec.training.model_copy(update={"global_batch_size": g})})
        _, ev, _ = _best(s2, method, controls)
        if ev is not None:
            out.append(Relaxation(requirement="training.global_batch_size",
                                  change=f"use a global batch of {g} sequences (was {gbs})",
                                  patch={"training.global_batch_size": g}, plan=ev))
            break
    return out
