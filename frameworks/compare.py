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
NOT_SOLVED = "not solved: the call's time limit was spent"  # the reason of a framework not solved for lack of time


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
    UNKNOWN, not solved. One process; :class:`FrameworkSolves` starts them on the free cores before ``result``."""
    return FrameworkSolves(spec, frameworks, deadline, **optimize_args).compared(result)


class FrameworkSolves:
    """The per-framework solves of ``spec`` (:func:`best_per_framework`'s), started before the spec's own result is
    known: with ``concurrent``, worker processes forked now (frameworks/compare_workers.py; one per further free
    core) start solving at once, while this process solves the spec itself; :meth:`compared` then joins them and
    compares every answer with the result. The same answers as one process (each solve is exact; the seeds it is
    handed only speed it up), in less wall time on a machine with a core to spare; each process's solve gets the
    time left over the frameworks that process still has to start. :meth:`cancel` ends the workers unused."""

    def __init__(self, spec, frameworks: Optional[list[str]] = None, deadline: Optional[float] = None,
                 concurrent: bool = False, **optimize_args):
        from parplan.frameworks.compare_workers import Workers, worker_count

        self.spec, self.deadline, self.args = spec, deadline, optimize_args
        self.names = list(frameworks if frameworks is not None else other_frameworks(spec))
        self.seeds: list = []  # plans known (the result's, each framework's best added): solved first where legal
        controls = optimize_args.get("controls")
        workers = worker_count(len(self.names), controls.memory_budget_mib if controls is not None else None) \
            if concurrent else 0
        # the solves in the workers' order (positions into names: compare_workers.Workers hands out positions)
        self.order, mine = solve_order(spec, self.names) if workers else (list(range(len(self.names))), 0)
        self.workers = Workers(len(self.names), self._solve_at, workers, reserved=mine) if workers else None

    def _solve_at(self, position: int, solves: int) -> tuple[FrameworkBest, Any]:
        """:meth:`_solve` of the framework at ``position`` of :func:`solve_order`."""
        return self._solve(self.order[position], solves)

    def _solve(self, i: int, solves: int) -> tuple[FrameworkBest, Any]:
        """(framework ``i``'s best, not yet compared; its spec) within its share of the time left: an equal share
        among the ``solves`` this process has still to start, this one included."""
        args = self.args
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left < LEAST_SOLVE_S:
                return FrameworkBest(self.names[i], "UNKNOWN", reason=NOT_SOLVED), None
            args = dict(self.args, controls=replace(self.args["controls"], time_limit_s=left / solves))
        return _framework_best(self.spec, self.names[i], self.seeds, args)

    def compared(self, result) -> list[FrameworkBest]:
        """Every framework's best (solved here where no worker has it), compared with ``result.plans[0]``."""
        self.seeds[:0] = [p.plan for p in result.plans]
        if self.workers is not None:
            answers = [None] * len(self.names)
            for position, answer in enumerate(self.workers.finish(self._solve_at, self.deadline)):
                answers[self.order[position]] = answer
        else:
            answers = [self._solve(i, len(self.names) - i) for i in range(len(self.names))]
        ref = result.plans[0] if result.plans else None
        return [_compare(line, other, self.spec, ref) for line, other in answers]

    def cancel(self) -> None:
        """End the workers without their answers (the result has no plan to compare with, or the call failed)."""
        if self.workers is not None:
            self.workers.close()


def solve_order(spec, names: list[str]) -> tuple[list[int], int]:
    """(the order the concurrent solves take the frameworks ``names`` in, indices into it; how many of its last are
    this process's alone): those whose cost pieces are the spec's own (solver/warm_cache.py ``spec_key``: the same
    conventions, e.g. ``any`` and Megatron-Core) last, reserved to this process, which takes them once its own solve is
    done (compare_workers.Workers.finish takes from the end) and finds the pieces warm; the others first, for the
    workers; each group in ``names``' order. Only who solves what and
    when moves: each answer is the same wherever it is solved (compare_workers' docstring), and is reported in
    ``names``' order."""
    from parplan.solver.warm_cache import spec_key

    mine = spec_key(spec)

    def shares(name: str) -> bool:
        try:
            return spec_key(spec_for_framework(spec, name)) == mine
        except Exception:  # noqa: BLE001  (the order is a matter of speed: the solve itself reports what failed)
            return False

    sharing = [shares(name) for name in names]
    return [i for i, s in enumerate(sharing) if not s] + [i for i, s in enumerate(sharing) if s], sum(sharing)


def _framework_best(spec, name: str, seeds: list, args: dict) -> tuple[FrameworkBest, Any]:
    """(the best plan of ``spec`` under framework ``name``: one ``optimize``, top 1, ``args``, ``seeds`` solved first
    and its best appended; the spec under ``name``, None where it is invalid)."""
    from parplan.costmodel.errors import ParplanError
    from parplan.solver.planner import optimize

    try:
        other = spec_for_framework(spec, name)
        got = optimize(other, top_k=1, seeds=seeds, **args)
    except (ParplanError, ValueError) as err:
        return FrameworkBest(name, "INVALID", reason=error_reason(err)), None
    if not got.plans:
        why = got.explanation.summary if got.explanation is not None else None
        return FrameworkBest(name, got.status, reason=why), other
    seeds.append(got.plans[0].plan)
    return FrameworkBest(name, got.status, got.plans[0]), other


def _compare(line: FrameworkBest, other, spec, ref) -> FrameworkBest:
    """``line`` with how its best compares with ``ref`` (the result's best evaluation; None: no plan)."""
    if line.best is None or ref is None:
        return line
    return replace(line, vs_best=line.best.metrics.step_time_s / ref.metrics.step_time_s - 1,
                   differs=differences(spec, ref.plan, other, line.best.plan))
