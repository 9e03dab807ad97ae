"""Plan completion: a partial ``plan:`` given to ``optimize`` pins the fields it sets; the rest are searched.

Every field the user set in ``plan:`` (pydantic's ``model_fields_set``: a key present in the YAML, whatever its
value) becomes a pin: the matching ``search:`` restriction narrowed to that one value. A value the ``search:``
list excludes is a contradiction, an error naming both keys. The fields left unset are the ones the planner
completes (``PlanResult.completed``). ``num_microbatches`` has no ``search:`` key: it is pinned in the space
(``SpaceOptions.num_microbatches``). The per-stage lists (``stage_layers``, ``recompute_layers``,
``pipeline_layout``) would pin the split itself; they are not completed around yet and are refused by name.

A spec without a ``plan:`` is returned unchanged, so its answers are today's.
"""

from __future__ import annotations

from typing import Optional

from parplan.costmodel.errors import ArgumentError
from parplan.costmodel.spec.plan_fields import PER_STAGE, SEARCH_KEYS
from parplan.costmodel.spec.spec import PlanSpec, Spec

PIN_KEYS = SEARCH_KEYS  # plan field -> the search key that restricts it (costmodel/spec/plan_fields.py)
SPACE_PINS = ("num_microbatches",)  # pinned in the space, no search key


class PlanConflict(ArgumentError):
    """A ``plan:`` field that contradicts the spec's ``search:`` (or cannot be pinned): bad input, exit 2."""

    def __init__(self, field: str, rule: str, value: object = None):
        super().__init__(field, rule, value)


def plan_fields() -> list[str]:
    """Every field of ``plan:`` in its declared order."""
    return list(PlanSpec.model_fields)


def pinned_fields(plan: Optional[PlanSpec]) -> list[str]:
    if plan is None:
        return []
    return [f for f in plan_fields() if f in plan.model_fields_set]


def completed_fields(plan: Optional[PlanSpec]) -> list[str]:
    """The plan fields the planner chose: every field ``plan:`` leaves unset (all of them without a plan)."""
    pinned = set(pinned_fields(plan))
    return [f for f in plan_fields() if f not in pinned]


def pinned_spec(spec: Spec) -> Spec:
    """The spec whose ``search:`` carries the plan's pins (the spec itself when it has no ``plan:``)."""
    plan = spec.plan
    if plan is None:
        return spec
    update: dict = {}
    for f in pinned_fields(plan):
        if f in PER_STAGE:
            if getattr(plan, f) is None:
                continue
            raise PlanConflict(f"plan.{f}", "a fixed per-stage split is not completed by optimize yet: leave it "
                               "out to have it chosen, or use solver-cli evaluate for the whole plan", getattr(plan, f))
        if f in SPACE_PINS or f not in PIN_KEYS:
            continue
        value = getattr(plan, f)
        key = PIN_KEYS[f]
        if f == "optimizer_states" and value is None:
            current = spec.search.optimizer_states
            if current is not None:
                raise PlanConflict(f"plan.{f}", f"unset (the assumptions' optimizer bytes) is not among "
                                   f"search.{key} {current}", value)
            continue
        current = getattr(spec.search, key)
        if f == "sequence_parallel" and value is False and current is not None and False not in current \
                and getattr(plan, "tp", None) in (None, 1) and (spec.search.tp is None or 1 in spec.search.tp):
            # SP is off at TP 1 whatever search.sequence_parallel says (solver/space.py sequence_parallel_values):
            # a TP-1 plan reports it off, and pinning that keeps the TP-1 plans
            update.setdefault("tp", [1])
            continue
        if current is not None and value not in current:
            raise PlanConflict(f"plan.{f}", f"{value!r} is not among search.{key} {list(current)}: the plan "
                               "and the search contradict each other", value)
        update[key] = [value]
    search = spec.search.model_copy(update=update)
    return spec.model_copy(update={"search": search})  # the plan stays: its num_microbatches pins the space


def num_microbatches_pin(spec: Spec) -> Optional[tuple[int, ...]]:
    plan = spec.plan
    if plan is None or "num_microbatches" not in plan.model_fields_set or plan.num_microbatches is None:
        return None
    return (plan.num_microbatches,)


def explanation_names(spec: Spec) -> dict[str, str]:
    """search key -> the plan field whose pin it carries, for the explanation (only pins the user's ``search:``
    did not already hold)."""
    plan = spec.plan
    names = {}
    for f in pinned_fields(plan):
        if f in PIN_KEYS:
            names[f"search.{PIN_KEYS[f]}"] = f"plan.{f}"
    return names
