"""What the readers of exported files share (``frameworks/import_plan.py``, ``import_torchtitan.py``): their
error, exact division with a message naming the key, and the base spec with the file's plan and fields."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import ValidationError

from parplan.costmodel.spec.spec import Spec
from parplan.frameworks.export_common import ExportError
from parplan.frameworks.loader import validate_spec


class ImportPlanError(ExportError):
    """An exported file that does not describe a plan for the base spec; the message names the key."""


def divide_exactly(total: int, part: int, what: str) -> int:
    """``total / part``, or an ImportPlanError naming ``what`` when it does not divide."""
    if part <= 0 or total % part:
        raise ImportPlanError(f"{what}: {total} is not divisible by {part}")
    return total // part


def spec_with(base: Spec, *, plan: dict[str, Any], model: Optional[dict[str, Any]] = None,
              training: Optional[dict[str, Any]] = None, assumptions: Optional[dict[str, Any]] = None) -> Spec:
    """``base`` with ``plan`` and the file's model, training and assumption fields, validated (an ImportPlanError
    names the first field that fails)."""
    data = base.model_dump(mode="python", exclude_none=True)
    data["plan"] = plan
    if model:
        data["model"] = {**data["model"], **model}
    if training:
        data["training"] = {**data["training"], **training}
    if assumptions:
        data["assumptions"] = {**data.get("assumptions", {}), **assumptions}
    try:
        return validate_spec(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ImportPlanError(f"{where}: {first.get('msg', 'invalid')}") from None
