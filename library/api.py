"""The library's entry points: ``optimize`` and ``evaluate`` of a spec given as a Spec, a path or a dict.

These are what ``import parplan`` exports. Each coerces its spec with
:func:`~parplan.library.spec_io.as_spec` (so a path or a dict is validated with the same strict rules
and field-path errors as ``solver-cli``) and calls the planner or the cost model. Errors a caller can
fix are :class:`~parplan.costmodel.errors.ParplanError` (``SpecError``, ``PlanError``,
``ArgumentError``); anything else is a bug.

The planner and the cost model are imported when first called, so ``import parplan`` stays cheap
(OR-Tools alone takes about a second to import).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Union

from parplan.library.spec_io import as_spec

if TYPE_CHECKING:  # pragma: no cover - names for the annotations only
    from parplan.costmodel.evaluation.ledger import Evaluation
    from parplan.costmodel.spec.spec import Plan, PlanSpec
    from parplan.solver.result import PlanResult


# SolverControls fields that optimize() also takes directly: optimize(spec, time_limit_s=2, workers=1) is
# optimize(spec, controls=SolverControls(time_limit_s=2, workers=1))
CONTROL_FIELDS = ("time_limit_s", "workers", "seed", "deterministic", "memory_budget_mib", "cancel", "log")


def optimize(spec: Any, **kwargs: Any) -> "PlanResult":
    """The best plans for ``spec`` (a Spec, a path to YAML/JSON, or a dict).

    Keyword arguments are those of :func:`parplan.solver.planner.optimize` (``method``, ``top_k``,
    ``pareto``, ``controls``, ``on_solution``); their ranges are in :mod:`parplan.solver.arguments`. The fields
    of :class:`~parplan.solver.cpsat.SolverControls` (``time_limit_s``, ``workers``, ``seed``, ``deterministic``,
    ``memory_budget_mib``, ``cancel``, ``log``) may be given directly instead of ``controls``, checked by the same
    rules (an ``ArgumentError`` naming the field); giving both is an ``ArgumentError`` too."""
    from parplan.solver.planner import optimize as planner_optimize

    kwargs = controls_of_arguments(kwargs)
    return planner_optimize(as_spec(spec), **kwargs)


def controls_of_arguments(kwargs: dict) -> dict:
    """``kwargs`` with the SolverControls fields among them gathered into ``controls`` (validated)."""
    given = {k: kwargs[k] for k in CONTROL_FIELDS if k in kwargs}
    if not given:
        return kwargs
    from parplan.costmodel.errors import ArgumentError
    from parplan.solver.cpsat import SolverControls

    if kwargs.get("controls") is not None:
        first = next(iter(given))
        raise ArgumentError(first, "give either controls=SolverControls(...) or its fields "
                            f"({', '.join(given)}) as arguments, not both", given[first])
    rest = {k: v for k, v in kwargs.items() if k not in given}
    rest["controls"] = SolverControls(**given)  # __post_init__: solver/arguments' range checks
    return rest


def evaluate(spec: Any, plan: Union["Plan", "PlanSpec", dict, None] = None, **kwargs: Any) -> "Evaluation":
    """The cost model's full ledger for ``plan`` on ``spec`` (a Spec, a path to YAML/JSON, or a dict).

    ``plan`` is a ``Plan``, a ``PlanSpec``, a dict of ``plan:`` keys, or None for the spec's own
    ``plan:`` (a spec without one is a ``PlanError``). Keyword arguments are those of
    :func:`parplan.costmodel.evaluation.evaluate.evaluate` (``assumptions``, ``gpu``). It runs through
    :func:`parplan.library.evaluation.evaluate_spec`, the CLI's path, whose checks let only
    ``SpecError``/``PlanError`` escape."""
    from parplan.library.evaluation import evaluate_spec

    spec = as_spec(spec)
    return evaluate_spec(spec, as_plan(plan), **kwargs)


def as_plan(plan: Any) -> Optional[Union["Plan", "PlanSpec"]]:
    from pydantic import ValidationError

    from parplan.costmodel.evaluation.evaluate import PlanError
    from parplan.library.contract import plan_fields
    from parplan.library.spec_io import validation_error_message
    from parplan.costmodel.spec.spec import Plan, PlanSpec

    if plan is None or isinstance(plan, (Plan, PlanSpec)):
        return plan
    if isinstance(plan, dict):
        try:
            return PlanSpec.model_validate(plan_fields(plan))  # a CONTRACT plan's derived num_gpus dropped
        except ValidationError as err:
            raise PlanError(validation_error_message(err, prefix=("plan",))) from None
    raise PlanError(f"plan: expected a Plan, a PlanSpec or a dict of plan keys, got {type(plan).__name__}")


__all__ = ["optimize", "evaluate"]
