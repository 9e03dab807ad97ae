"""The best plan on each other framework, beside a result (``solver-cli optimize``'s "best per framework").

One extra ``optimize`` per framework (top 1, the same method and controls): exact, as the spec's own answer is,
not a filter of the first search's runners-up (a framework's best may be no runner-up of another's).

The spec is re-validated under each framework: its ``assumptions:`` keep what the user set, less the values the
spec's own framework profile filled (a value the user set equal to that profile's cannot be told apart and is
replaced by the other framework's convention, like every unset knob); its search pins stay, and pins the other
framework cannot run make that line an ``INVALID`` entry with the reason. On several ``cluster.pools`` the same: one
pool solve per framework (``solver/pools/planner.py``); a framework that runs no pool plan (torchtitan, DeepSpeed)
is an ``INVALID`` line naming ``framework``, with no solve.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Optional

from pydantic import ValidationError

from parplan.frameworks.profiles import FRAMEWORKS, framework_assumptions, spec_profile, tp_values

ANY = "any"  # the framework-neutral research space (ZB-H1, DualPipe)
LEAST_SOLVE_S = 0.05  # a per-framework solve with less time left than this is not started


@dataclass(frozen=True)
class FrameworkBest:
    """The best plan under ``framework`` (``any``: the research space) and how it compares."""

    framework: str
    status: str  # OPTIMAL | FEASIBLE | INFEASIBLE | UNKNOWN | INVALID (the spec's pins conflict with it)
    best: Optional[Any] = None  # costmodel.evaluation.ledger.Evaluation
    vs_best: Optional[float] = None  # step time / the result's best step time - 1 (negative: faster)
    reason: Optional[str] = None  # why there is no plan (INVALID: the spec error; else the explanation summary)
    differs: tuple[str, ...] = ()  # what makes it differ from the result's best: conventions, then plan choices


# plan fields named when a framework's best differs from the result's best, in this order (``differs``)
_PLAN_FIELDS = (("schedule", "schedule"), ("vpp", "VPP"), ("tp", "TP"), ("cp", "CP"), ("pp", "PP"), ("dp", "DP"),
                ("ep", "EP"), ("etp", "expert-TP"), ("zero_stage", "ZeRO stage"), ("zero_replicas", "HSDP replicas"),
                ("activation_offload_layers", "activation offload layers"),
                ("optimizer_offload_fraction", "optimizer offload"), ("optimizer_states", "optimizer states"),
                ("recompute", "recompute"), ("sequence_parallel", "sequence parallel"),
                ("micro_batch_size", "micro-batch"), ("cp_comm_type", "CP comm"),
                ("stage_pools", "stage pools"))


# the framework conventions (the profiles' cost-model knobs, frameworks/profile_data.py) in a user's words: what the
# table prints before the knob's own ``name mine -> theirs`` (the JSON ``differs`` keeps the names alone)
CONVENTION_WORDS = {
    "grad_bytes": "gradient buffer precision (bytes per element)",
    "grad_reduce_bytes": "gradient reduce precision (bytes per element)",
    "logits_bytes_per_element": "logits memory of the loss (bytes per logit)",
    "selective_recompute_policy": "what selective recompute recomputes",
    "sequence_parallel_saves_gathered_inputs": "sequence parallel keeps the all-gathered inputs",
    "pipeline_runtime": "pipeline runtime and its buffers",
    "userbuffer_count": "Transformer Engine userbuffers for TP overlap",
    "te_cublas_workspaces": "Transformer Engine cuBLAS workspaces",
    "tp_comm_overlap": "TP communication overlapped with GEMMs",
    "dp_overlap_min_zero_stage": "least ZeRO stage whose DP traffic overlaps",
    "moe_pad_to_capacity": "experts padded to capacity",
    "dp_comm_overlap": "share of DP traffic hidden behind the backward",
    "pp_comm_overlap": "share of pipeline p2p hidden",
    "flash_attention": "fused (flash) attention",
}


def in_words(item: str) -> str:
    """One ``differs`` item for people: a convention's words before its ``knob mine -> theirs``
    (:data:`CONVENTION_WORDS`), a plan choice (already in words: ``PP 4 -> 1``) as it is."""
    knob = item.split(" ", 1)[0]
    return f"{CONVENTION_WORDS[knob]} ({item})" if knob in CONVENTION_WORDS else item


def _short(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def differences(spec, plan, other_spec, other_plan) -> tuple[str, ...]:
    """What separates ``other_plan`` under ``other_spec`` from ``plan`` under ``spec``: first the cost-model
    conventions of the two frameworks that differ (the profiles' knobs, e.g. ``grad_bytes 4 -> 2``: Megatron-Bridge's
    bf16 gradients), then the plan's choices (``PP 2 -> 1``, ``ZeRO stage 1 -> 3``, ``activation offload layers
    0 -> 10``), each as ``name mine -> theirs``."""
    from parplan.costmodel.spec.assumptions import resolve_assumptions

    mine, theirs = resolve_assumptions(spec.assumptions), resolve_assumptions(other_spec.assumptions)
    out = [f"{name} {_short(getattr(mine, name))} -> {_short(getattr(theirs, name))}"
           for name in type(mine).model_fields if getattr(mine, name) != getattr(theirs, name)]
    for name, label in _PLAN_FIELDS:
        a, b = getattr(plan, name), getattr(other_plan, name)
        if name == "vpp" and plan.pp == 1 and other_plan.pp == 1:
            continue
        if name == "recompute" and "full" in (a, b) and (a, list(plan.recompute_layers)) != (b, list(other_plan.recompute_layers)):
            a, b = f"{a} {list(plan.recompute_layers)}", f"{b} {list(other_plan.recompute_layers)}"
        if a != b:
            out.append(f"{label} {_short(a)} -> {_short(b)}")
    return tuple(out)


def error_reason(err: Exception) -> str:
    """An INVALID line's reason in one line: a validation error's first error with its field path (the spec's rule
    as the user reads it), else the error's first line."""
    if isinstance(err, ValidationError):
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = str(first.get("msg", "")).removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    return str(err).splitlines()[0]


def other_frameworks(spec) -> list[str]:
    """The profiled frameworks other than the spec's, then ``any`` where the spec names a framework."""
    mine = spec_profile(spec)
    if mine is None:
        return list(FRAMEWORKS)
    return [name for name in FRAMEWORKS if name != mine.name] + [ANY]


def spec_for_framework(spec, name: str):
    """``spec`` under framework ``name`` (``any``: none), its own profile's filled knobs taken back out."""
    from parplan.frameworks.loader import validate_spec

    data = spec.model_dump(mode="json", exclude_none=True)
    mine = spec_profile(spec)
    section = dict(data.get("assumptions") or {})
    if mine is not None:
        for key, value in framework_assumptions(mine, tp_values(data)).items():
            if key in section and section[key] == value:
                del section[key]
    data["assumptions"] = section
    data["framework"] = name
    return validate_spec(data)


def best_per_framework(spec, result, frameworks: Optional[list[str]] = None, deadline: Optional[float] = None,
                       **optimize_args) -> list[FrameworkBest]:
    """For each framework (default :func:`other_frameworks`), the best plan of ``spec`` under it, compared with
    ``result.plans[0]`` (``optimize_args``: method, controls, ... as given to ``solver.planner.optimize``).
    ``deadline`` (``time.monotonic()``): when the whole call must end; each framework's solve gets an equal share
    of the time left (its controls' ``time_limit_s``), and one reached with less than :data:`LEAST_SOLVE_S` left is
    UNKNOWN, not solved."""
    from parplan.costmodel.errors import ParplanError
    from parplan.solver.planner import optimize

    ref = result.plans[0].metrics.step_time_s if result.plans else None
    names = list(frameworks if frameworks is not None else other_frameworks(spec))
    out = []
    seeds = [p.plan for p in result.plans]  # plans known, each framework's best added: solved first where legal
    for i, name in enumerate(names):
        args = optimize_args
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < LEAST_SOLVE_S:
                out.append(FrameworkBest(name, "UNKNOWN", reason="not solved: the call's time limit was spent"))
                continue
            args = dict(optimize_args, controls=replace(optimize_args["controls"], time_limit_s=left / (len(names) - i)))
        try:
            other = spec_for_framework(spec, name)
            got = optimize(other, top_k=1, seeds=seeds, **args)
        except (ParplanError, ValueError) as err:
            out.append(FrameworkBest(name, "INVALID", reason=error_reason(err)))
            continue
        if not got.plans:
            why = got.explanation.summary if got.explanation is not None else None
            out.append(FrameworkBest(name, got.status, reason=why))
            continue
        best = got.plans[0]
        seeds.append(best.plan)
        vs = None if ref is None else best.metrics.step_time_s / ref - 1
        why = () if not result.plans else differences(spec, result.plans[0].plan, other, best.plan)
        out.append(FrameworkBest(name, got.status, best, vs, differs=why))
    return out
