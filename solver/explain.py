"""Why nothing fits, and what would.

1. The infeasibility core: the space with every user pin and requirement relaxed, each requirement a switch; a
   deletion filter over exact per-choice feasibility (the same integer model the solver uses) shrinks the full
   requirement set to a minimal conflicting one. (CP-SAT's sufficient assumptions, cpsat-modeling.md §2.10, are
   minimised, not guaranteed minimal; a model of the whole relaxed space is slow to build. This is exact and minimal.)
2. Relaxations: for each requirement of the core, and for GPU count and batch size, the smallest concrete change
   that admits a plan; each is checked by solving the changed request.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Optional

import numpy as np

from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.evaluation.prediction_band import usable_for_band_gib, with_memory_band
from parplan.costmodel.spec.hardware import GIB
from parplan.costmodel.memory.runtime_memory import memory_for_usable
from parplan.costmodel.spec.spec import CP_COMM_TYPES, SearchSpec, Spec
from parplan.costmodel.spec.spec_base import MAX_NUM_GPUS
from parplan.solver.cpsat import SolverControls
from parplan.solver.frontier import candidate_gpu_counts
from parplan.solver.deadline import OverBudget, TimeUp, past
from parplan.solver.oracle import solve_table
from parplan.solver.problem import Problem
from parplan.solver.result import Explanation, Relaxation
from parplan.solver.search import Searcher, best_plans
from parplan.solver.space import SpaceOptions
from parplan.solver.tables import KIB, MIB_KIB

UNBOUNDED_KIB = 1 << 50  # a memory cap no plan reaches: structural feasibility only

PIN_FIELDS = ("tp", "cp", "pp", "dp", "ep", "etp", "micro_batch_size", "vpp")


def _requirements(spec: Spec) -> list[str]:
    """The user's restrictions and the memory requirement, as names users can act on."""
    s = spec.search
    req = ["memory"]
    for f in PIN_FIELDS:
        if getattr(s, f) is not None:
            req.append(f"search.{f}")
    for f in ("schedules", "zero_stages", "recompute", "sequence_parallel", "cp_comm_types"):
        if getattr(s, f) is not None:
            req.append(f"search.{f}")
    if s.resolved_stage_split != "per_stage":
        req.append("search.stage_split" if s.stage_split is not None else "search.uneven_stages")
    if s.uniform_recompute:
        req.append("search.uniform_recompute")
    return req


_PIN_NAMES = {f"search.{f}": f for f in PIN_FIELDS}  # a requirement -> its field (of Choice and SearchSpec)


def _violates(c, spec: Spec, name: str) -> bool:
    s = spec.search
    if (f := _PIN_NAMES.get(name)) is not None:
        return getattr(c, f) not in getattr(s, f)
    if name == "search.schedules":
        return c.schedule not in s.schedules
    if name == "search.zero_stages":
        return c.zero_stage not in s.zero_stages
    if name == "search.recompute":
        return c.recompute not in s.recompute
    if name == "search.sequence_parallel":
        return c.sequence_parallel not in s.sequence_parallel
    if name == "search.cp_comm_types":
        return c.cp > 1 and c.cp_comm_type not in s.cp_comm_types
    return False


def _core(spec: Spec, relaxed: Problem, requirements: list[str], deadline: Optional[float]) -> list[str]:
    """A minimal set of requirements that together admit no plan (empty if all together admit one).

    Feasibility of a requirement set S is exact: some choice of the relaxed space violates no pin in S
    and has a stage split and recompute counts that fit (when S holds the memory requirement) under the stage
    split and recompute rule S asks for (solved per choice as the exhaustive search does, cached). Deletion
    filter: drop each requirement whose removal leaves the rest infeasible; what remains is a minimal
    conflicting set. Raises TimeUp past ``deadline``.
    """
    cap = relaxed.cap_kib
    split_req = {"search.uneven_stages", "search.stage_split"}
    pins = [r for r in requirements if r.startswith("search.") and r not in split_req | {"search.uniform_recompute"}]
    choices = relaxed.choices
    violated = [frozenset(r for r in pins if _violates(c, spec, r)) for c in choices]
    order = [int(i) for i in np.argsort(relaxed.quick_lb, kind="stable")]
    wanted_split = spec.search.resolved_stage_split
    cache: dict[tuple, bool] = {}

    def row_ok(i: int, memory: bool, split: str, uniform: bool) -> bool:
        key = (i, memory, split, uniform)
        if key not in cache:
            if past(deadline):
                raise TimeUp()
            if memory and relaxed.quick_mem_kib[i] > cap:
                cache[key] = False
            elif memory and (split != "per_stage" or uniform) and not row_ok(i, True, "per_stage", False):
                cache[key] = False
            else:
                t = relaxed.table(i, split=split, uniform=uniform)
                cache[key] = solve_table(t, cap if memory else UNBOUNDED_KIB, deadline) is not None
        return cache[key]

    def feasible(active: list[str]) -> bool:
        act = set(active)
        memory = "memory" in act
        split = wanted_split if act & split_req else "per_stage"
        uniform = "search.uniform_recompute" in act
        return any(not (violated[i] & act) and row_ok(i, memory, split, uniform) for i in order)

    if feasible(requirements):
        return []
    core = list(requirements)
    for r in list(core):
        rest = [q for q in core if q != r]
        if not feasible(rest):
            core = rest
    return core


def _relaxed_options(spec: Spec, opts: SpaceOptions, names: list[str]) -> SpaceOptions:
    """``opts`` with the requirements ``names`` lifted back to what the spec's framework allows (every value when
    no framework is given): an explanation never suggests a plan the target framework cannot run."""
    free = SpaceOptions.from_spec(spec.model_copy(update={"search": SearchSpec()}))
    changes = {}
    for r in names:
        if r.startswith("search."):
            f = r.split(".")[1]
            if f in PIN_FIELDS or f == "sequence_parallel":
                changes[f] = getattr(free, f)
            elif f in ("schedules", "zero_stages", "recompute"):
                changes[f] = getattr(free, f)
            elif f in ("uneven_stages", "stage_split"):
                changes["uneven_stages"] = free.uneven_stages
                changes["stage_split"] = free.stage_split
            elif f == "uniform_recompute":
                changes[f] = free.uniform_recompute
            elif f == "cp_comm_types":  # every type the framework runs (the default space has p2p only)
                every = SpaceOptions.from_spec(spec.model_copy(update={"search": SearchSpec(
                    cp_comm_types=list(CP_COMM_TYPES))}))
                changes[f] = every.cp_comm_types
    return replace(opts, **changes)


def _best(spec: Spec, method: str, controls: SolverControls, deadline: Optional[float],
          options: Optional[SpaceOptions] = None, cap_kib: Optional[int] = None, min_memory: bool = False):
    """(problem, best evaluation or None) of a changed request; raises TimeUp past ``deadline``."""
    if min_memory:
        problem = Problem.build(spec, options=options, deadline=deadline)
        problem.cap_kib = cap_kib or problem.cap_kib
        s = Searcher(problem, "exhaustive", controls, deadline)
        peak = s.min_peak()
        if peak is None:
            return problem, None
        out = s.best(peak * MIB_KIB, 1)
    else:
        problem, out = best_plans(spec, method, controls, options=options, cap_kib=cap_kib, deadline=deadline)
    if out.status in ("UNKNOWN", "FEASIBLE") and not out.found:
        raise TimeUp()
    if not out.found:
        return problem, None
    f = out.found[0]
    return problem, problem.evaluation(f.row_index, f.x)


def _unenumerated(err: TimeUp) -> str:
    """The summary when the relaxed space could not be enumerated: past the memory budget, or out of time."""
    return (f"no plan found; the explanation's relaxed space is past the memory budget ({err}; SolverControls."
            "memory_budget_mib, solver-cli optimize --memory-budget-mib)" if isinstance(err, OverBudget) else
            "no plan found; the explanation ran out of time before it could enumerate the relaxed space")


def explain(spec: Spec, problem: Problem, method: str = "cpsat", controls: Optional[SolverControls] = None,
            deadline: Optional[float] = None, band_ratio: Optional[float] = None) -> Explanation:
    """Why nothing fits and what would, within ``deadline``: the conflicting requirements first (40 % of the time
    left), the least memory any plan needs (20 %), then the relaxations; each part stops at its share with
    what it has, and the summary says when it is incomplete; ``band_ratio``: the memory band's (its margin's scale)."""
    controls = controls or SolverControls()
    now = time.perf_counter()
    left = (deadline - now) if deadline is not None else None

    def share(frac: float) -> Optional[float]:
        return None if left is None else time.perf_counter() + max(0.0, deadline - time.perf_counter()) * frac

    usable = problem.cap_kib * KIB / GIB
    requirements = _requirements(spec)
    rejected = dict(problem.space.rejected)
    incomplete = []
    relaxed_opts = replace(_relaxed_options(spec, problem.options, requirements), prune_dominated=False)
    try:
        relaxed = Problem.build(spec, options=relaxed_opts, deadline=share(0.4))
    except TimeUp as err:
        return Explanation(summary=_unenumerated(err), conflicting=[], rejected_choices=rejected,
                           usable_memory_gib=usable)
    if not relaxed.choices:
        return _no_legal_degrees(spec, relaxed, method, controls, deadline, rejected, usable)
    try:
        core = _core(spec, relaxed, requirements, share(0.4))
    except TimeUp:
        core = []
        incomplete.append("the conflicting requirements")
    # the least memory any plan needs, with the user's pins kept
    min_mem_plan = None
    if "memory" in core:
        try:
            _, min_mem_plan = _best(spec, method, controls, share(0.33), options=problem.options,
                                    cap_kib=problem.cap_kib * 64, min_memory=True)
        except TimeUp:
            incomplete.append("the least memory a plan needs")
    min_needed = min_mem_plan.metrics.peak_memory_gib if min_mem_plan is not None else None
    relaxations: list[Relaxation] = []
    for r in core:
        if r == "memory":
            if min_mem_plan is not None and min_needed is not None:
                relaxations.append(_memory_relaxation(spec, problem, min_mem_plan, min_needed, usable, band_ratio))
            continue
        opts = _relaxed_options(spec, problem.options, [r])
        try:
            _, ev = _best(spec, method, controls, share(0.3), options=opts)
        except TimeUp:
            incomplete.append(f"relaxing {r}")
            continue
        if ev is not None:
            f = r.split(".", 1)[1]
            patch = ({"search.uneven_stages": True, "search.stage_split": None} if f in ("uneven_stages", "stage_split")
                     else {r: False} if f == "uniform_recompute" else {r: None})
            relaxations.append(Relaxation(requirement=r, change=_describe_change(r, ev), patch=patch, plan=ev))
    notes = []
    relaxations += _size_relaxations(spec, method, controls, deadline, incomplete, notes)
    return Explanation(summary=_summary(core, min_needed, usable) + _suffix(incomplete, notes), conflicting=core,
                       rejected_choices=rejected,
                       min_memory_needed_gib=min_needed, usable_memory_gib=usable, relaxations=relaxations)


def _no_legal_degrees(spec: Spec, relaxed: Problem, method: str, controls: SolverControls, deadline: Optional[float],
                      rejected: dict, usable: float) -> Explanation:
    """The explanation when even the relaxed space has no legal choice of degrees: the rules that rejected most
    choices, and the GPU counts or batches that would have some (:func:`_size_relaxations`)."""
    top = sorted(relaxed.space.rejected.items(), key=lambda kv: -kv[1])[:3]
    reasons = "; ".join(f"{k} ({n} choices)" for k, n in top) or "no divisor combination of the GPU count"
    incomplete: list[str] = []
    notes: list[str] = []
    sizes = _size_relaxations(spec, method, controls, deadline, incomplete, notes)
    return Explanation(summary=f"no choice of degrees is legal for {spec.cluster.num_gpus} GPUs and a global batch "
                               f"of {spec.training.global_batch_size}: {reasons}" + _suffix(incomplete, notes),
                       conflicting=["cluster.num_gpus", "training.global_batch_size"], rejected_choices=rejected,
                       usable_memory_gib=usable, relaxations=sizes)


def _memory_relaxation(spec: Spec, problem: Problem, min_mem_plan, min_needed: float, usable: float,
                       band_ratio: Optional[float] = None) -> Relaxation:
    """The memory a GPU would need for the least-memory plan (the user's pins kept), as a ``cluster.memory_gib``
    patch, with that plan evaluated under the relaxed spec. Under the memory band the plan fits where
    ``peak / band_ratio`` does (the margin is recomputed at the larger memory)."""
    wanted = usable_for_band_gib(min_needed, band_ratio) if band_ratio else min_needed + spec.search.memory_margin_gib
    need_gib = math.ceil(memory_for_usable(wanted, problem.assumptions) * 10) / 10
    relaxed = _with_memory(spec, need_gib)
    if band_ratio:
        relaxed = with_memory_band(relaxed.model_copy(update={"search": relaxed.search.model_copy(
            update={"memory_margin_gib": 0.0})}))
    return Relaxation(
        requirement="memory",
        change=f"the least memory any plan needs is {min_needed:.1f} GiB per GPU, "
               f"{min_needed - usable:.1f} GiB more than the {usable:.1f} GiB usable on "
               f"{spec.cluster.gpu}: a GPU with {need_gib:.1f} GiB (cluster.memory_gib) fits it",
        patch={"cluster.memory_gib": need_gib},
        plan=evaluate(relaxed, min_mem_plan.plan))


def _summary(core: list[str], min_needed: Optional[float], usable: float) -> str:
    """The explanation's first line: which requirements conflict, and the least memory a plan needs."""
    if core == ["memory"]:
        summary = "no plan fits in GPU memory, even with every search restriction lifted"
    elif core:
        summary = (f"no plan satisfies {core[0]}" if len(core) == 1
                   else f"no plan satisfies {', '.join(core)} together")
    else:
        summary = "no plan found within the solver's limits"
    if min_needed is not None and "memory" in core:
        summary += f"; the least memory any allowed plan needs is {min_needed:.1f} GiB per GPU against {usable:.1f} GiB usable"
    return summary


def _suffix(incomplete: list[str], notes: list[str] = ()) -> str:
    """The summary's tail: what the relaxations' search found nothing for (``notes``), what it ran out of time before."""
    return "".join(f"; {note}" for note in notes) + (f" (out of time before: {', '.join(incomplete)})"
                                                      if incomplete else "")


def _with_memory(spec: Spec, memory_gib: float) -> Spec:
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"memory_gib": memory_gib})})


def _describe_change(requirement: str, ev) -> str:
    p = ev.plan
    f = requirement.split(".", 1)[1]
    value = {"tp": p.tp, "cp": p.cp, "pp": p.pp, "dp": p.dp, "ep": p.ep, "etp": p.etp,
             "micro_batch_size": p.micro_batch_size, "vpp": p.vpp, "schedules": p.schedule,
             "zero_stages": p.zero_stage, "recompute": p.recompute, "sequence_parallel": p.sequence_parallel,
             "cp_comm_types": p.cp_comm_type, "uneven_stages": p.stage_layers, "stage_split": p.stage_layers,
             "uniform_recompute": p.recompute_layers}.get(f)
    if f in ("uneven_stages", "stage_split"):
        return f"allow every stage its own layer count (search.stage_split: per_stage), e.g. stage_layers {value}"
    if f == "uniform_recompute":
        return f"allow per-stage recompute counts (search.uniform_recompute: false), e.g. {value}"
    return f"allow {f} = {value} in search.{f}"


MORE_GPUS_FACTOR = 8  # without search.max_num_gpus, the nearest larger counts tried go up to 8x the request
PAST_BOUND_FACTOR = 1024  # ... and past it, doublings up to 1024x (each one solve), so the advice names a count


def _size_relaxations(spec: Spec, method: str, controls: SolverControls, deadline: Optional[float],
                      incomplete: list[str], notes: list[str]) -> list[Relaxation]:
    """The nearest GPU counts below and above the request (down to one node's worth of powers of two, up to
    ``search.max_num_gpus`` when set, else 8x) and the nearest batch sizes that admit a plan, each solved. When
    no larger count up to that bound fits, :func:`_past_the_bound` says so and names the knob (issue 42)."""
    out: list[Relaxation] = []
    n0 = spec.cluster.num_gpus
    upper = MORE_GPUS_FACTOR * n0 if spec.search.max_num_gpus is None else max(n0, spec.search.max_num_gpus)
    counts = candidate_gpu_counts(spec, upper=upper)
    fewer = [n for n in reversed(counts) if n < n0]
    more = [n for n in counts if n > n0]
    end = deadline
    for label, seq in (("fewer", fewer), ("more", more)):
        for n in seq:
            if past(end):
                incomplete.append(f"{label} GPUs")
                break
            ev = _best_at_count(spec, method, controls, end, n)
            if ev is False:
                incomplete.append(f"{label} GPUs")
                break
            if ev is not None:
                out.append(Relaxation(requirement="cluster.num_gpus", change=f"use {n} GPUs ({n - n0:+d})",
                                      patch={"cluster.num_gpus": n}, plan=ev))
                break
        else:
            if label == "more":
                out += _past_the_bound(spec, method, controls, end, upper, incomplete, notes)
    gbs = spec.training.global_batch_size
    for factor in (0.5, 2.0, 0.25, 4.0, 0.125, 8.0):
        g = int(gbs * factor)
        if g < 1 or g == gbs or gbs * factor != g:
            continue
        if past(end):
            incomplete.append("other batch sizes")
            break
        s2 = spec.model_copy(update={"training": spec.training.model_copy(update={"global_batch_size": g})})
        try:
            _, ev = _best(s2, method, controls, end)
        except TimeUp:
            incomplete.append("other batch sizes")
            break
        if ev is not None:
            out.append(Relaxation(requirement="training.global_batch_size",
                                  change=f"use a global batch of {g} sequences (was {gbs})",
                                  patch={"training.global_batch_size": g}, plan=ev))
            break
    return out


def _best_at_count(spec: Spec, method: str, controls: SolverControls, end: Optional[float], n: int):
    """The best plan at ``n`` GPUs, None when none fits or ``n`` breaks a user pin's divisibility, False out of time."""
    try:
        return _best(spec.at_gpus(n), method, controls, end)[1]
    except TimeUp:
        return False
    except ValueError:  # a GPU count that breaks a user pin's divisibility: not a candidate
        return None


def _past_the_bound(spec: Spec, method: str, controls: SolverControls, end: Optional[float], upper: int,
                    incomplete: list[str], notes: list[str]) -> list[Relaxation]:
    """No larger count up to ``upper`` fits. A user's ``search.max_num_gpus`` is kept (a note names it);
    without one, doublings of ``upper`` up to PAST_BOUND_FACTOR x the request are solved and the first that
    fits is a relaxation that names the bound and the counts it skipped."""
    n0 = spec.cluster.num_gpus
    if spec.search.max_num_gpus is not None:
        notes.append(f"no GPU count above {n0} up to search.max_num_gpus = {upper} fits (raise it to try more)")
        return []
    n = 2 * upper
    while n <= min(PAST_BOUND_FACTOR * n0, MAX_NUM_GPUS):
        ev = False if past(end) else _best_at_count(spec, method, controls, end, n)
        if ev is False:
            incomplete.append(f"GPU counts past {upper}")
            return []
        if ev is not None:
            return [Relaxation(requirement="cluster.num_gpus", patch={"cluster.num_gpus": n}, plan=ev, change=(
                f"use {n} GPUs ({n - n0:+d}); no count from {n0 + 1} to {upper} fits ({MORE_GPUS_FACTOR}x the "
                f"request, the bound without search.max_num_gpus; counts between {n // 2} and {n} were not tried)"))]
        n *= 2
    notes.append(f"no GPU count above {n0} up to {n // 2} fits")
    return []
