"""A pydantic validation error of a spec as the one line the CLI and the service print: each error's field path
(``plan.stage_layers[2]``, as the spec writes it), what is wrong, the value given, a close field name for an
unknown key (``did you mean 'num_layers'?``); the first few errors, ``; ``-joined."""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any, Optional

from pydantic import BaseModel, ValidationError

from parplan.costmodel.spec.spec import Spec
from parplan.library.messages import one_line

MAX_ERRORS_SHOWN = 3
_MAX_PATH_PART = 40


def short_repr(value: Any, limit: int = _MAX_PATH_PART) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_FIELD_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*): ")


def format_path(loc: tuple[Any, ...], root: str = "spec") -> str:
    """``('plan', 'stage_layers', 2)`` -> ``plan.stage_layers[2]``; odd keys are quoted."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and _IDENT.match(part) and len(part) <= _MAX_PATH_PART:
            out += ("." if out else "") + part
        else:
            out += f"[{short_repr(part)}]"
    return out or root


def _unwrap_model(annotation: Any) -> Optional[type[BaseModel]]:
    """The pydantic model inside ``Optional[M]`` / ``list[M]`` / ``M``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def _model_at(loc: tuple[Any, ...]) -> Optional[type[BaseModel]]:
    model: Optional[type[BaseModel]] = Spec
    for part in loc:
        if model is None:
            return None
        if not isinstance(part, str):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _unwrap_model(field.annotation)
    return model


def _describe_error(err: dict[str, Any], prefix: tuple[Any, ...] = ()) -> str:
    loc = prefix + tuple(err.get("loc", ()))
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid"))
    if kind == "missing" and loc:
        return f"{format_path(loc[:-1])}: missing required field {short_repr(loc[-1])}"
    if kind == "extra_forbidden" and loc:
        text = f"{format_path(loc)}: unknown key"
        model = _model_at(loc[:-1])
        if model is not None and isinstance(loc[-1], str):
            close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1)
            if close:
                text += f" (did you mean {close[0]!r}?)"
        return text
    if kind == "invalid_key" and loc:
        return f"{format_path(loc[:-1])}: key {short_repr(loc[-1])} must be a string"
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
        # a validator of a section may name the exact field inside it: "search.ep: ..." raised at "search"
        named = _FIELD_PREFIX.match(msg)
        path = format_path(loc)
        if named and (not loc or named.group(1) == path or named.group(1).startswith((path + ".", path + "["))):
            return msg
    elif kind == "assertion_error":
        msg = msg.removeprefix("Assertion failed, ")
    text = f"{format_path(loc)}: {msg}"
    if "input" in err and kind not in ("value_error", "model_type", "model_attributes_type"):
        value = err["input"]
        if value is None or isinstance(value, (bool, int, float, str)):
            text += f" (got {short_repr(value)})"
    return text


def validation_error_message(err: ValidationError, limit: int = MAX_ERRORS_SHOWN,
                             prefix: tuple[Any, ...] = ()) -> str:
    """The first few errors of a pydantic ValidationError, '; '-joined on one line; ``prefix`` is
    prepended to every error location (for models validated below the top level)."""
    try:
        errors = err.errors(include_url=False, include_context=False)
    except Exception:  # pragma: no cover - pydantic-core always gives a list
        return one_line(str(err))
    text = "; ".join(_describe_error(e, prefix) for e in errors[:limit]) or "invalid spec"
    if len(errors) > limit:
        text += f" (and {len(errors) - limit} more)"
    return text
