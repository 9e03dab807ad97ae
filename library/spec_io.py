"""Reading a spec: YAML text or a file in, a validated :class:`~parplan.costmodel.spec.spec.Spec` out.

Every failure, whatever the input text, is a :class:`SpecError` whose message is ONE line naming the
field path and the rule, e.g. ``model.num_layers: Input should be greater than 0``,
``cluster.gpu: unknown GPU 'H900'; known: ...`` or ``spec.yaml: malformed YAML at line 3 column 5: ...``.

Beyond the pydantic schema (``costmodel/spec/spec.py``), loading adds a few checks:

* duplicate keys in a YAML mapping are an error (PyYAML would silently keep the last one), and aliases expand to
  a bounded size (library/safe_yaml.py);
* numbers must be finite (no ``.inf`` / ``.nan``) and integers at most 2**53 (the cost model computes
  in floating point; larger integers overflow it or lose exactness);
* knob overrides under ``assumptions:`` are checked against the knobs' ranges (the schema of the
  section only checks their types; the cost model applies the ranges when it resolves the preset);
* ``training.precision: fp8`` needs a GPU with FP8 peak rate (catalog or ``cluster.peak_fp8_tflops``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, Optional, Union

from pydantic import ValidationError

from parplan.library.huggingface import ModelSourceError, expand_model_section
from parplan.library.safe_yaml import parse_yaml, read_capped  # noqa: F401  (read_capped re-exported)
from parplan.library.spec_error import SpecError
from parplan.library.profile import ProfileError, with_profile
from parplan.library.messages import one_line  # noqa: F401  (re-exported: server/, client/ import it from here)
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.spec import MAX_NUM_GPUS, Spec
from parplan.frameworks.loader import validate_spec
from parplan.library.validation_messages import format_path, short_repr, validation_error_message

MAX_SPEC_BYTES = 4 * 2**20  # spec files are a few KB; refuse to slurp /dev/zero
MAX_INT = 2**53  # largest integer the float arithmetic of the cost model represents exactly


# ---------------------------------------------------------------------------------------------- YAML


# ---------------------------------------------------------------------------- post-schema checks


def _check_numbers(data: Any, path: tuple[Any, ...] = ()) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            _check_numbers(value, path + (key,))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            _check_numbers(value, path + (i,))
    elif isinstance(data, float) and not math.isfinite(data):
        raise SpecError(f"{format_path(path)}: must be a finite number (got {data!r})")
    elif isinstance(data, int) and not isinstance(data, bool) and abs(data) > MAX_INT:
        raise SpecError(f"{format_path(path)}: {short_repr(data)} is out of range (at most 2**53 = {MAX_INT})")


def check_spec(spec: Spec) -> Spec:
    """The checks the schema does not make (see the module docstring)."""
    _check_numbers(spec.model_dump(mode="python", exclude_none=True))
    try:  # the knob overrides are checked against the knobs' ranges only when the preset is applied
        resolve_assumptions(spec.assumptions)
    except ValidationError as err:
        raise SpecError(validation_error_message(err, prefix=("assumptions",))) from None
    try:
        resolve_gpu(spec.cluster).peak_tflops(spec.training.precision)
    except ValueError as err:
        raise SpecError(f"training.precision: {err}") from None
    return spec


# ------------------------------------------------------------------------------------------ entry


def spec_from_data(data: Any, name: str = "spec", *, base_dir: str = ".", notes: Optional[list[str]] = None) -> Spec:
    """Validate already-parsed data (a dict from YAML or JSON) into a :class:`Spec`.

    ``model: {hf_config: ...}`` / ``model: {preset: ...}`` are expanded first (library/huggingface.py;
    a relative hf_config path is read from ``base_dir``); what the expansion could not map is appended
    to ``notes``. A ``profile:`` (library/profile.py) is merged under the ``assumptions:`` section first."""
    if data is None:
        raise SpecError(f"{name}: empty spec (expected a mapping with model, training and cluster)", source=name)
    if not isinstance(data, dict):
        raise SpecError(f"{name}: the top level must be a mapping of sections (model, training, cluster, ...), "
                        f"got {type(data).__name__}", source=name)
    try:
        data = expand_model_section(with_profile(data, base_dir), base_dir=base_dir, warnings=notes)
    except ProfileError as err:
        raise SpecError(str(err)) from None
    except ModelSourceError as err:
        raise SpecError(str(err), source=name) from None
    try:
        spec = validate_spec(data)
    except ValidationError as err:
        raise SpecError(validation_error_message(err), source=name) from None
    except RecursionError:
        raise SpecError(f"{name}: spec nested too deeply", source=name) from None
    except (ValueError, TypeError) as err:  # a validator that raised outside pydantic's wrapping
        raise SpecError(f"{name}: {err}", source=name) from None
    return check_spec(spec)


def parse_spec(text: Union[str, bytes], name: str = "spec", *, base_dir: str = ".",
               notes: Optional[list[str]] = None) -> Spec:
    """A spec from YAML (or JSON) text."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SpecError(f"{name}: not UTF-8 text (byte {err.start}: {err.reason})", source=name) from None
    if not text.strip():
        raise SpecError(f"{name}: empty spec (expected a mapping with model, training and cluster)", source=name)
    return spec_from_data(parse_yaml(text, name), name, base_dir=base_dir, notes=notes)


def read_spec_text(path: Union[str, os.PathLike]) -> str:
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"{name}: file not found", source=name) from None
    except IsADirectoryError:
        raise SpecError(f"{name}: is a directory, not a spec file", source=name) from None
    except PermissionError:
        raise SpecError(f"{name}: permission denied", source=name) from None
    except (OSError, ValueError) as err:  # ValueError: embedded NUL in the path
        reason = getattr(err, "strerror", None) or str(err)
        raise SpecError(f"{name}: cannot read: {reason}", source=name) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{name}: larger than {MAX_SPEC_BYTES // 2**20} MiB; not a spec file", source=name)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(f"{name}: not UTF-8 text (byte {err.start}: {err.reason})", source=name) from None


def load_spec_file(path: Union[str, os.PathLike], notes: Optional[list[str]] = None) -> Spec:
    name = os.fspath(path)
    return parse_spec(read_spec_text(path), name=name, base_dir=os.path.dirname(name) or ".", notes=notes)


def _looks_like_path(text: str) -> bool:
    if "\n" in text or "\r" in text or not text.strip():
        return False
    if text.lower().endswith((".yaml", ".yml", ".json")):
        return True
    try:
        return os.path.exists(text)
    except (OSError, ValueError):
        return False


def load_spec(path_or_text: Union[str, bytes, os.PathLike]) -> Spec:
    """A spec from a path (``Path``, or a one-line string naming an existing file or ending in
    ``.yaml``/``.yml``/``.json``) or from YAML text. Raises only :class:`SpecError`."""
    try:
        if isinstance(path_or_text, os.PathLike):
            return load_spec_file(path_or_text)
        if isinstance(path_or_text, bytes):
            return parse_spec(path_or_text)
        if isinstance(path_or_text, str):
            if _looks_like_path(path_or_text):
                return load_spec_file(path_or_text)
            return parse_spec(path_or_text)
        raise SpecError(f"load_spec: expected a path or YAML text, got {type(path_or_text).__name__}")
    except SpecError:
        raise
    except RecursionError:
        raise SpecError("spec: nested too deeply") from None
    except (ValueError, TypeError, OverflowError, ArithmeticError, UnicodeError) as err:
        # Belt and braces: nothing but SpecError leaves this function for any input text. The fuzz
        # tests treat this message as a bug to fix in the targeted handlers above.
        raise SpecError(f"spec: internal error while reading ({type(err).__name__}): {err}") from None


def as_spec(obj: Any) -> Spec:
    """Any spec a caller may hand the library, as a validated :class:`Spec`:

    * a ``Spec`` (checked with :func:`check_spec`, as a loaded one is);
    * a path (``str`` or ``os.PathLike``) to a YAML or JSON file, or YAML text (as :func:`load_spec`);
    * a mapping of sections (as from ``yaml.safe_load``), validated like a file's contents.

    Raises only :class:`SpecError` (for any other type, naming it)."""
    if isinstance(obj, Spec):
        return check_spec(obj)
    if isinstance(obj, (str, bytes, os.PathLike)):
        return load_spec(obj)
    if isinstance(obj, Mapping):
        try:
            return spec_from_data(dict(obj))
        except SpecError:
            raise
        except (ValueError, TypeError, OverflowError, ArithmeticError, RecursionError) as err:
            raise SpecError(f"spec: internal error while reading ({type(err).__name__}): {err}") from None
    raise SpecError(f"spec: expected a Spec, a path to a YAML/JSON file or a mapping, got {type(obj).__name__}")


__all__ = ["SpecError", "as_spec", "load_spec", "load_spec_file", "parse_spec", "spec_from_data", "check_spec",
           "validation_error_message", "format_path", "one_line", "MAX_INT", "MAX_NUM_GPUS"]

