"""The points of a sweep: the base spec with each point's dotted-key values applied, validated one by one.

Every error here is a :class:`SweepError` (a ``ParplanError``: exit 2 from the CLI) of one line that names
the axis and the value: ``axes.cluster.num_gpus: value 12: cluster.num_gpus ...``. A point the base spec
accepts but on which nothing fits is not an error: it is solved and recorded INFEASIBLE with its explanation.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from pydantic import BaseModel, ValidationError

from parplan.library.huggingface import ModelSourceError, expand_model_section
from parplan.library.spec_io import (SpecError, one_line, parse_yaml, read_spec_text, spec_from_data,
                                    validation_error_message)
from parplan.library.sweep.spec import MAX_POINTS, SweepSpec
from parplan.costmodel.errors import ParplanError
from parplan.costmodel.spec.hardware import UnknownGPU, resolve_gpu_name
from parplan.costmodel.spec.spec import Spec


class SweepError(ParplanError):
    """A sweep spec that cannot run: one line naming the key (and for an axis, the value)."""


@dataclass(frozen=True)
class Point:
    """One what-if: its index in sweep order, the values of its axes (as the user wrote them) and the
    resolved spec (JSON-able: the Spec's ``model_dump(mode="json")``, models expanded)."""

    index: int
    axes: dict[str, Any]
    spec: dict[str, Any]


@dataclass(frozen=True)
class Sweep:
    spec: SweepSpec
    base: dict[str, Any]  # the resolved base spec (model section expanded)
    points: list[Point]


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _annotation_model(annotation: Any) -> Optional[type[BaseModel]]:
    from typing import get_args

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _annotation_model(arg)
        if found is not None:
            return found
    return None


def check_axis_key(key: str) -> None:
    """A dotted key must name a spec field (``model`` values may also be presets / HF configs)."""
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise SweepError(f"axes.{key}: not a dotted spec key (e.g. cluster.num_gpus)")
    model: Optional[type[BaseModel]] = Spec
    walked: list[str] = []
    for part in key.split("."):
        if model is None:  # inside a free mapping (assumptions knobs are checked when the spec is validated)
            return
        if part not in model.model_fields:
            where = ".".join(walked) or "spec"
            raise SweepError(f"axes.{key}: unknown spec key {part!r} in {where} "
                             f"(known: {', '.join(sorted(model.model_fields))})")
        model = _annotation_model(model.model_fields[part].annotation)
        walked.append(part)


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def _model_value(value: Any, sweep_dir: str) -> Any:
    """``model`` axis values: a preset name, a config.json path (relative to the sweep file) or a mapping."""
    if isinstance(value, str):
        if value.lower().endswith(".json"):
            return {"hf_config": value if os.path.isabs(value) else os.path.join(sweep_dir, value)}
        return {"preset": value}
    return value


def _load_base(base: Union[str, dict[str, Any]], sweep_dir: str) -> tuple[dict[str, Any], str]:
    if isinstance(base, str):
        path = base if os.path.isabs(base) else os.path.join(sweep_dir, base)
        try:
            data = parse_yaml(read_spec_text(path), path)
        except SpecError as err:
            raise SweepError(f"base: {err}") from None
        if not isinstance(data, dict):
            raise SweepError(f"base: {path}: the top level must be a mapping of spec sections")
        return data, os.path.dirname(path) or "."
    return copy.deepcopy(base), sweep_dir


def _resolve(data: dict[str, Any], base_dir: str) -> dict[str, Any]:
    """Validated spec (one-line SpecError otherwise) as its JSON dump."""
    return spec_from_data(data, "spec", base_dir=base_dir, notes=[]).model_dump(mode="json")


def grid(spec: SweepSpec) -> list[dict[str, Any]]:
    """Axis values per point: the product of ``axes`` (in their order, the last varying fastest), then ``points``."""
    for key, values in spec.axes.items():
        check_axis_key(key)
        if not values:
            raise SweepError(f"axes.{key}: empty list (give at least one value)")
    for i, point in enumerate(spec.points):
        if not point:
            raise SweepError(f"points[{i}]: empty mapping (give at least one dotted spec key)")
        for key in point:
            try:
                check_axis_key(key)
            except SweepError as err:
                raise SweepError(f"points[{i}].{str(err)[len('axes.'):]}") from None
    out: list[dict[str, Any]] = []
    if spec.axes:
        count = 1
        for values in spec.axes.values():
            count *= len(values)
        if count > MAX_POINTS:
            raise SweepError(f"axes: {count} points (at most {MAX_POINTS})")
        keys = list(spec.axes)
        out += [dict(zip(keys, combo)) for combo in itertools.product(*spec.axes.values())]
    out += [dict(point) for point in spec.points]
    if not out:
        out = [{}]  # the base spec alone
    if len(out) > MAX_POINTS:
        raise SweepError(f"points: {len(out)} points (at most {MAX_POINTS})")
    return out


def _first_bad_axis(base: dict[str, Any], axes: dict[str, Any], base_dir: str, sweep_dir: str) -> Optional[str]:
    """The axis whose value alone (on the base spec) is rejected, for the error line; None if only the
    combination is."""
    for key, value in axes.items():
        data = copy.deepcopy(base)
        _set(data, key, _model_value(value, sweep_dir) if key == "model" else value)
        try:
            _resolve(data, base_dir)
        except (SpecError, ModelSourceError):
            return key
    return None


def load_sweep(source: Union[str, os.PathLike, dict[str, Any], SweepSpec], *, sweep_dir: str = ".",
               check: Optional[Callable[[], None]] = None, profile: Optional[str] = None) -> Sweep:
    """A sweep from a YAML path, a mapping or a :class:`SweepSpec`: every point resolved and validated;
    ``check`` (if given) runs before each point and may raise to stop (the Sweep RPC's deadline); ``profile``
    (``sweep --profile``, a calibration profile's path: library/profile.py) is set as the base spec's ``profile:``."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            data = parse_yaml(read_spec_text(path), path)
        except SpecError as err:
            raise SweepError(str(err)) from None
        sweep_dir = os.path.dirname(path) or "."
    else:
        data = source
    if isinstance(data, SweepSpec):
        spec = data
    else:
        if not isinstance(data, dict):
            raise SweepError("sweep: the top level must be a mapping (base, axes, budget, ...)")
        try:
            spec = SweepSpec.model_validate(data)
        except ValidationError as err:
            raise SweepError(validation_error_message(err, prefix=())) from None
    for name in spec.prices:
        try:
            resolve_gpu_name(name)
        except UnknownGPU as err:
            raise SweepError(f"prices.{name}: {err}") from None
    base_data, base_dir = _load_base(spec.base, sweep_dir)
    if profile is not None:
        base_data = {**base_data, "profile": profile}
    try:
        base = _resolve(base_data, base_dir)
    except (SpecError, ModelSourceError) as err:
        raise SweepError(f"base: {err}") from None
    points: list[Point] = []
    for index, axes in enumerate(grid(spec)):
        if check is not None:
            check()
        data = copy.deepcopy(base_data)
        for key, value in axes.items():
            _set(data, key, _model_value(value, sweep_dir) if key == "model" else value)
        try:
            resolved = _resolve(expand_model_section(data, base_dir=base_dir, warnings=[]), base_dir)
        except (SpecError, ModelSourceError) as err:
            bad = _first_bad_axis(base_data, axes, base_dir, sweep_dir)
            if bad is not None:
                raise SweepError(one_line(f"axes.{bad}: value {_short(axes[bad])}: {err}")) from None
            values = ", ".join(f"{k}={_short(v)}" for k, v in axes.items())
            raise SweepError(one_line(f"point {index} ({values}): {err}")) from None
        points.append(Point(index=index, axes=axes, spec=resolved))
    return Sweep(spec=spec, base=base, points=points)


def diff_sections(base: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """The top-level sections in which ``spec`` differs from ``base`` (what a task is sent besides the
    base, which is shipped once); :func:`merge_sections` inverts it."""
    out = {key: value for key, value in spec.items() if base.get(key) != value}
    missing = [key for key in base if key not in spec]
    if missing:
        out["__removed__"] = missing
    return out


def merge_sections(base: dict[str, Any], diff: dict[str, Any]) -> dict[str, Any]:
    merged = {key: value for key, value in base.items() if key not in diff.get("__removed__", ())}
    merged.update({key: value for key, value in diff.items() if key != "__removed__"})
    return merged


__all__ = ["SweepError", "Point", "Sweep", "load_sweep", "grid", "check_axis_key", "diff_sections",
           "merge_sections"]
