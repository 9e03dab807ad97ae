"""Evaluate a spec's plan for the CLI and the service: only :class:`SpecError` or :class:`PlanError` escape.

:func:`evaluate_spec` wraps :func:`parplan.costmodel.evaluation.evaluate.evaluate` with the checks that let any
validated spec be evaluated safely:

* a plan of the wrong shape (``ep·etp`` not dividing ``tp·cp·dp``, ``tp·cp·pp·dp`` not the cluster, more
  stages than layers) is refused by the cost model's one shape check,
  :func:`parplan.costmodel.evaluation.evaluate.check_plan_shape`, before it builds per-stage lists; its message is made
  one line here;
* a schema error raised while resolving the plan becomes a :class:`PlanError`;
* an evaluation whose metrics are not finite numbers (extreme sizes or assumption values) becomes a
  :class:`SpecError`, so no report ever carries ``inf``/``nan`` (invalid JSON).

The plan is judged by the planner's rule of fit: under ``search.memory_band`` (on by default) the usable memory
is less the memory band's margin (:func:`parplan.costmodel.evaluation.prediction_band.with_memory_band`), so a plan
``evaluate`` says fits is one ``optimize`` may return.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

from pydantic import ValidationError

from parplan.library.spec_io import SpecError, format_path, one_line, validation_error_message
from parplan.costmodel.evaluation.evaluate import NO_PLAN, PlanError, check_plan_shape, evaluate
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.evaluation.prediction_band import with_memory_band
from parplan.costmodel.spec.spec import Plan, PlanSpec, Spec


COST_MODEL_FAILED = "the cost model failed"


def _non_finite(data: Any, path: tuple[Any, ...] = ()) -> Optional[tuple[tuple[Any, ...], float]]:
    if isinstance(data, dict):
        for key, value in data.items():
            found = _non_finite(value, path + (key,))
            if found:
                return found
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            found = _non_finite(value, path + (i,))
            if found:
                return found
    elif isinstance(data, float) and not math.isfinite(data):
        return path, data
    return None


def evaluate_spec(spec: Spec, plan: Union[Plan, PlanSpec, None] = None, **kwargs: Any) -> Evaluation:
    """Evaluate ``plan`` (default: the spec's ``plan:``; a spec without one is a PlanError naming ``plan``) under the
    memory band's margin where ``search.memory_band`` applies (module docstring).
    ``kwargs`` go to the cost model's ``evaluate``. Raises only SpecError/PlanError."""
    if plan is None:
        plan = spec.plan
    if plan is None:
        raise PlanError(NO_PLAN)
    try:
        evaluation = evaluate(with_memory_band(spec), plan, **kwargs)
    except PlanError as err:
        raise PlanError(one_line(str(err))) from None
    except ValidationError as err:
        raise PlanError(validation_error_message(err, prefix=("plan",))) from None
    except (ArithmeticError, RecursionError) as err:  # a cost-model bug; the fuzz tests flag COST_MODEL_FAILED
        raise SpecError(f"spec: {COST_MODEL_FAILED} on this spec and plan ({type(err).__name__}: {err})") from None
    found = _non_finite({"metrics": evaluation.metrics.model_dump(),
                         "stages": [s.model_dump() for s in evaluation.stages]})
    if found:
        path, value = found
        raise SpecError(f"spec: the cost model produced {format_path(path)} = {value!r}; some sizes or "
                        f"assumption values in the spec are out of range")
    return evaluation


__all__ = ["evaluate_spec", "check_plan_shape", "SpecError", "PlanError", "COST_MODEL_FAILED"]
