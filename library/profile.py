"""A calibration profile: assumption overrides fitted on the user's own runs, with their provenance.

``solver-cli calibrate`` writes one (library/calibrate.py); a spec names it with a top-level ``profile:`` (a path,
relative to the spec's folder, or the profile's mapping inline; the service takes only the inline form), and
``optimize``/``evaluate``/``sweep --profile FILE`` set that key. It is applied through the mechanism every knob
override uses: its ``assumptions`` are merged into the spec's ``assumptions:`` section before the spec is validated,
*under* the spec's own overrides (a knob the spec sets keeps the spec's value) and over the framework profile's
conventions (costmodel/spec/spec.py ``_framework_conventions`` applies those under the section). A spec without
``profile:`` is read exactly as before.

The file is YAML::

    kind: parplan-profile
    version: 1
    created: 2026-12-07T01:02Z        # UTC, when calibrate ran
    gpu: H100-SXM-80GB                # the catalog GPU of the runs
    assumptions: {matmul_efficiency_hopper: 0.71, ...}   # the overrides: knob -> value
    sources: [{file: run1.log, kind: megatron-log, sha256: ...}, ...]
    fit: {...}                        # what calibrate printed: each knob's move, the leave-one-out errors
"""

from __future__ import annotations

import os
from typing import Any, Optional

from pydantic import ValidationError

from parplan.costmodel.spec.assumptions import AssumptionsSpec, resolve_assumptions
from parplan.library.safe_yaml import parse_yaml, read_capped

PROFILE_KIND = "parplan-profile"
PROFILE_VERSION = 1
MAX_PROFILE_BYTES = 1 << 20


class ProfileError(ValueError):
    """An unusable profile; the message names the field (``profile.assumptions.<knob>: ...``)."""


def check_profile(data: Any, name: str = "profile") -> dict[str, Any]:
    """The profile mapping, checked: its kind and version, and every override a knob within its range (the
    section's own schema, costmodel/spec/assumptions.py AssumptionsSpec). Returns the overrides."""
    if not isinstance(data, dict):
        raise ProfileError(f"{name}: a profile mapping (kind: {PROFILE_KIND}, assumptions: ...) is required")
    if data.get("kind") != PROFILE_KIND:
        raise ProfileError(f"{name}.kind: must be {PROFILE_KIND!r} (got {data.get('kind')!r})")
    if data.get("version") != PROFILE_VERSION:
        raise ProfileError(f"{name}.version: must be {PROFILE_VERSION} (got {data.get('version')!r})")
    overrides = data.get("assumptions")
    if not isinstance(overrides, dict) or "preset" in overrides:
        raise ProfileError(f"{name}.assumptions: a mapping of knob -> value (no preset)")
    try:
        resolve_assumptions(AssumptionsSpec.model_validate(overrides))
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ProfileError(f"{name}.assumptions.{where}: {first.get('msg')}") from None
    return dict(overrides)


def read_profile(path: str) -> dict[str, Any]:
    """A profile file's mapping (YAML), checked by :func:`check_profile`."""
    try:
        raw = read_capped(path, MAX_PROFILE_BYTES)
    except ValueError as err:
        raise ProfileError(f"profile: {path}: {err}") from None
    data = parse_yaml(raw.decode("utf-8", errors="replace"), path)
    check_profile(data, f"profile ({path})")
    return data


def with_profile(data: Any, base_dir: str = ".") -> Any:
    """Spec data with its ``profile:`` (a path or a mapping) taken out and the profile's overrides merged under its
    ``assumptions:`` (module docstring). Data without ``profile:`` is returned as it is."""
    if not isinstance(data, dict) or "profile" not in data:
        return data
    data = dict(data)
    given = data.pop("profile")
    if given is None:
        return data
    if isinstance(given, str):
        path = given if os.path.isabs(given) else os.path.join(base_dir, given)
        overrides = check_profile(read_profile(path), f"profile ({given})")
    else:
        overrides = check_profile(given)
    section = data.get("assumptions")
    if section is not None and not isinstance(section, dict):
        return data  # the schema names the bad section
    data["assumptions"] = {**overrides, **(section or {})}
    return data


def profile_path_or_none(value: Optional[str]) -> Optional[str]:
    """``--profile``'s file as an absolute path (None: no option)."""
    return None if value is None else os.path.abspath(value)


__all__ = ["PROFILE_KIND", "PROFILE_VERSION", "ProfileError", "check_profile", "read_profile", "with_profile",
           "profile_path_or_none"]
