"""Reading a parplan.v1 request: its spec (typed or text, model sources resolved without touching the disk unless
the server allows a directory) through the library's loader, and its solver parameters range-checked by
``solver/arguments`` (server/service.py calls these before a call queues)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, Optional

import grpc

from parplan.library.hf_fields import HFFieldError, parse_json_int
from parplan.library.huggingface import MAX_CONFIG_BYTES, model_from_hf_config
from parplan.library.spec_io import MAX_SPEC_BYTES, SpecError, one_line, parse_yaml, spec_from_data
from parplan.costmodel.errors import ParplanError
from parplan.costmodel.spec.spec import Spec
from parplan.wire import convert
from parplan.solver.arguments import check_optimize_arguments
from parplan.v1 import planner_pb2 as pb

DEFAULT_TIME_LIMIT_S = 60.0  # as `solver-cli optimize --time-limit`
MIN_TIME_LIMIT_S = 0.01  # what is left of a deadline is never asked below this
MAX_TIME_LIMIT_S = 600.0  # a server-side cap: a call cannot hold a solver slot longer
DEADLINE_MARGIN_S = 0.25  # time kept back from the deadline to re-evaluate and send the answer


class RequestError(ParplanError):
    """A request field outside the service's rules (not the spec's: those are SpecError)."""

    def __init__(self, field_path: str, message: str):
        self.field_path = field_path
        super().__init__(f"{field_path}: {message}", field=field_path)


class MalformedRequest:
    """What the tolerant deserializer returns for bytes that are not the method's request message."""

    def __init__(self, message_type: str, error_type: str):
        self.message_type, self.error_type = message_type, error_type



# ------------------------------------------------------------------------------------- model sources


def read_allowed_hf_config(path: object, root: Optional[Path]) -> dict:
    """A request's ``model.hf_config``: refused unless ``root`` (``--hf-config-dir``) is set; then a relative
    path of plain names under it, every component checked with lstat (no link followed), opened with
    O_NOFOLLOW|O_NONBLOCK, a regular file of at most 1 MiB. Messages never quote the file's content."""
    field = "model.hf_config"
    if root is None:
        raise RequestError(field, "the service reads no files named by a request; send the config's text in "
                                  "model.hf_config_json (or use model.preset)")
    if not isinstance(path, str) or not path or "\0" in path:
        raise RequestError(field, "must be a relative path under the server's --hf-config-dir")
    parts = Path(path).parts
    if Path(path).is_absolute() or any(p in ("..", ".") for p in parts) or not parts:
        raise RequestError(field, "must be a relative path under the server's --hf-config-dir (no '..', not "
                                  "absolute)")
    current = root
    for i, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except OSError:
            raise RequestError(field, "no such config under --hf-config-dir") from None
        if stat.S_ISLNK(info.st_mode):
            raise RequestError(field, "is a symbolic link (not followed)")
        if i < len(parts) - 1 and not stat.S_ISDIR(info.st_mode):
            raise RequestError(field, "no such config under --hf-config-dir")
    if not stat.S_ISREG(info.st_mode):
        raise RequestError(field, "is not a regular file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise RequestError(field, f"larger than {MAX_CONFIG_BYTES // 2**20} MiB; not a config.json")
    try:
        fd = os.open(current, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        reason = "is a symbolic link (not followed)" if err.errno == errno.ELOOP else "cannot be read"
        raise RequestError(field, reason) from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise RequestError(field, "is not a regular file")
        raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise RequestError(field, f"larger than {MAX_CONFIG_BYTES // 2**20} MiB; not a config.json")
    return _config_json(raw, field)


def _config_json(raw: Any, field: str) -> dict:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        data = json.loads(text, parse_int=parse_json_int)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        where = f" (line {err.lineno}, column {err.colno})" if isinstance(err, json.JSONDecodeError) else ""
        raise RequestError(field, f"is not JSON text{where}") from None
    except ValueError:  # int() past sys.get_int_max_str_digits: a number of thousands of digits
        raise RequestError(field, "holds a number of more digits than any config field can use") from None
    if not isinstance(data, dict):
        raise RequestError(field, "must be a JSON object (a config.json)")
    return data


def expand_request_model(data: Any, hf_config_dir: Optional[Path], where: str = "model") -> Any:
    """The request's model sources, resolved without touching the disk: ``hf_config_json`` (inline text) and
    ``hf_config`` (refused, or read under ``hf_config_dir``) become plain model fields; ``preset`` is left to
    the library's expansion. Every config field is type- and range-checked before any arithmetic
    (library/hf_fields.py); ``where`` is the model section's path in errors (Sweep: ``base.model``,
    ``axes.model[0]``)."""
    if isinstance(data, dict) and isinstance(data.get("profile"), str):  # library/profile.py: inline only here
        field = where[: -len("model")] + "profile" if where.endswith("model") else "profile"
        raise RequestError(field, "the service reads no files named by a request; send the profile's content "
                                  "inline (the mapping solver-cli calibrate writes)")
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return data
    model = dict(data["model"])
    given = [k for k in ("hf_config", "hf_config_json", "preset") if k in model]
    if len(given) > 1:
        raise RequestError(where, f"give one of hf_config_json, preset (got {', '.join(given)})")
    source = f"{where}.hf_config_json" if "hf_config_json" in model else f"{where}.hf_config"
    if "hf_config_json" in model:
        text = model.pop("hf_config_json")
        if not isinstance(text, str) or len(text.encode("utf-8")) > MAX_CONFIG_BYTES:
            raise RequestError(source, f"must be the text of a config.json, at most "
                                       f"{MAX_CONFIG_BYTES // 2**20} MiB")
        config = _config_json(text, source)
    elif "hf_config" in model:
        config = read_allowed_hf_config(model.pop("hf_config"), hf_config_dir)
    else:
        return data
    try:
        mapped = model_from_hf_config(config, name=model.get("name") or "hf-config", where=source)
    except HFFieldError as err:
        raise RequestError(err.field_path, str(err).split(": ", 1)[-1]) from None
    except (ValueError, TypeError, KeyError) as err:
        message = one_line(str(err))
        raise RequestError(source, message.split(": ", 1)[-1] if ": " in message else message) from None
    return {**data, "model": {**mapped.fields, **model}}


# ------------------------------------------------------------------------------------------- requests


def _spec_source(request: Any) -> str:
    source = request.WhichOneof("spec_source")
    if source is None:
        raise RequestError("spec_source", "set spec (typed) or spec_text (the YAML or JSON of a spec file)")
    return source


def spec_data(request: Any, hf_config_dir: Optional[Path] = None) -> tuple[str, dict[str, Any]]:
    """(the request field the spec came from, the spec as a dict with its model sources resolved)."""
    source = _spec_source(request)
    if source == "spec":
        data = convert.spec_dict_from_message(request.spec)
    else:
        text = request.spec_text
        if len(text.encode("utf-8")) > MAX_SPEC_BYTES:
            raise RequestError("spec_text", f"larger than {MAX_SPEC_BYTES // 2**20} MiB; not a spec file")
        if not text.strip():
            raise SpecError("spec_text: empty spec (expected a mapping with model, training and cluster)")
        data = parse_yaml(text, "spec_text")
    return source, expand_request_model(data, hf_config_dir)


def read_spec(request: Any, plan: Optional[dict[str, Any]] = None,
              hf_config_dir: Optional[Path] = None) -> tuple[str, Spec]:
    source, data = spec_data(request, hf_config_dir)
    if plan is not None and isinstance(data, dict):
        data = {**data, "plan": plan}
    return source, spec_from_data(data, name=source)


def solver_parameters(params: pb.SolverParameters, *, top_k: int = 1, pareto: Optional[str] = None) -> dict[str, Any]:
    """The request's solver parameters (unset: the CLI's defaults), range-checked by ``solver/arguments``
    exactly as ``optimize()`` checks them (ArgumentError -> INVALID_ARGUMENT naming ``solver.<field>``)."""
    given = convert.message_to_dict(params, omit_unset=True, path="solver")
    out = {"method": given.get("method", "cpsat"), "time_limit_s": given.get("time_limit_s", DEFAULT_TIME_LIMIT_S),
           "workers": given.get("workers", 0), "deterministic": given.get("deterministic", False),
           "seed": given.get("seed", 1)}
    check_optimize_arguments(top_k=top_k, pareto=pareto, **out)
    out["time_limit_s"] = min(float(out["time_limit_s"]), MAX_TIME_LIMIT_S)
    return out


def capped_by_deadline(params: dict[str, Any], context: grpc.ServicerContext) -> dict[str, Any]:
    """The time limit capped by what is left of the call's deadline (after any wait for a slot)."""
    remaining = context.time_remaining()
    if remaining is None:
        return params
    return {**params, "time_limit_s": min(params["time_limit_s"], max(MIN_TIME_LIMIT_S, remaining - DEADLINE_MARGIN_S))}


def top_k(request: Any) -> int:
    return request.top_k if request.HasField("top_k") else 1


def pareto_axis(number: int, field: str) -> Optional[str]:
    return convert.enum_to_value(pb.ParetoAxis.DESCRIPTOR, number, field)


