"""A published run that the as-mapped plan does not fit, completed by the planner (solver/completion.py).

The mapping (:mod:`benchmarks.row_mapping`) gives every field a row leaves unstated its framework's default and
lists those fields in :attr:`Expression.unstated`. A run that ran did fit, so when that default plan is predicted
not to fit, the defaults are not what ran: the row is then judged at its best completion instead. The stated
fields become the pins of a partial ``plan:`` (its ``model_fields_set``), the unstated ones are left unset, and
``optimize`` (the library API, deterministic mode, a small time limit) searches only those: the fastest plan that
fits, which the comparison then uses, with every field it chose printed per row (:func:`completed_values`).

Rules (general, no row is named):

* a field the source states is never completed; the per-stage recompute counts are (no source here states
  Megatron's ``--recompute-num-layers``, and a partial plan cannot pin per-stage lists: solver/completion.py);
* a stage split the source states (a layout, first/last counts, Megatron's embedding/loss flags with a stated vpp)
  cannot be pinned by the planner yet, so such a row is not completed and keeps its verdict, with that reason;
* an unstated vpp completes the schedule between 1F1B and interleaved only (the schedules every row's framework
  has); the stage split is then the planner's (per-stage counts, trimmed end chunks);
* "nothing fits" is an answer: the row keeps its as-mapped verdict and the planner's status is printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from parplan.library.api import optimize
from parplan.costmodel.errors import ParplanError
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import PlanSpec, Spec

# the planner's limit per row (deterministic mode: CP-SAT's deterministic time, so the answer is reproducible)
TIME_LIMIT_S = 10.0
# plan fields that follow from a completion but are not searched by a pin of their own
_PER_STAGE = ("stage_layers", "recompute_layers", "pipeline_layout")
# the fields shown per completed row, in this order
SHOWN = ("micro_batch_size", "num_microbatches", "vpp", "schedule", "recompute", "recompute_layers", "zero_stage",
         "sequence_parallel", "stage_layers", "pipeline_layout")


@dataclass
class Completion:
    """The planner's best completion of a row, or why there is none."""

    fields: list[str] = field(default_factory=list)  # the plan fields the planner chose
    evaluation: Optional[Evaluation] = None
    status: str = ""
    reason: Optional[str] = None  # set when no completion was made (stated split, nothing fits)


def partial_plan(plan: PlanSpec, unstated: list[str]) -> PlanSpec:
    """The stated fields of ``plan`` as a partial ``plan:``: the unstated ones and the per-stage lists left unset
    (``num_microbatches`` too when the micro-batch size is unstated: it follows from it)."""
    skip = set(unstated) | set(_PER_STAGE) | {"num_microbatches"}
    given = {f: getattr(plan, f) for f in plan.model_fields_set if f not in skip}
    return PlanSpec(**given)


def complete(spec: Spec, plan: PlanSpec, unstated: list[str], time_limit_s: float = TIME_LIMIT_S) -> Completion:
    """The fastest plan that fits with the row's stated fields pinned (``spec`` carries the row's assumptions)."""
    if not unstated:
        return Completion(reason="every plan field is stated")
    if plan.pp > 1 and "stage_layers" not in unstated and (plan.stage_layers or plan.pipeline_layout):
        return Completion(reason="the source states its stage split, which a partial plan cannot pin yet "
                                 "(solver/completion.py: per-stage lists)")
    # a run that ran is judged by the ledger's point: the memory band is the planner's margin for plans not yet run
    search: dict[str, Any] = {"memory_band": False}
    if "schedule" in unstated:
        search["schedules"] = [Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED]  # model_copy does not validate: the enum
    partial = partial_plan(plan, unstated)
    asked = spec.model_copy(update={"plan": partial, "search": spec.search.model_copy(update=search)})
    try:
        result = optimize(asked, time_limit_s=time_limit_s, deterministic=True)
    except ParplanError as e:  # a pin the planner refuses (solver/completion.py PlanConflict): no completion
        return Completion(reason=f"not completed: {e}")
    chosen = list(result.completed or [])
    # what the planner chose: the unstated fields, the micro-batch count that follows, and the per-stage recompute
    # counts (no source states them; a partial plan cannot pin them)
    fields = [f for f in SHOWN if f in chosen and (f in unstated or f in ("recompute_layers", "num_microbatches"))]
    if not result.plans:
        return Completion(fields=fields, status=result.status, reason=f"no completion fits ({result.status})")
    return Completion(fields=fields, evaluation=result.plans[0], status=result.status)


def completed_values(c: Completion) -> dict[str, Any]:
    """field -> the value the planner chose, for the fields it completed (what the benchmark prints)."""
    if c.evaluation is None:
        return {}
    p = c.evaluation.plan
    out = {}
    for f in c.fields:
        v = getattr(p, f, None)
        if v is None:
            continue
        out[f] = v
    return out
