"""The explorer's JSON answers, built by the library (no web framework here: tests/client/test_ui.py calls these too).

Each function takes the request's decoded JSON body and returns a plain dict; bad input raises a
:class:`~parplan.costmodel.errors.ParplanError` naming the field (``spec.model.num_layers``, ``top_k``,
``plan.tp``), which client/ui/app.py answers as HTTP 400. The spec travels as YAML text (``spec_yaml``) and is
read exactly as ``solver-cli`` reads a file (:func:`parplan.library.spec_io.parse_yaml` then
:func:`~parplan.library.spec_io.spec_from_data`); plans and results are the CONTRACT dicts of
:mod:`parplan.library.contract`, so every number the page shows is the cost model's own.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Optional

import yaml

from parplan.costmodel.errors import ArgumentError, ParplanError
from parplan.library.spec_io import SpecError, parse_yaml, spec_from_data

MAX_UI_TIME_LIMIT_S = 600.0  # one browser request solves for at most this long (the page shows a spinner)


def field_of(body: Any, name: str, kind: type, default: Any = ...) -> Any:
    """``body[name]`` checked to be a ``kind`` (an ArgumentError naming ``name`` otherwise)."""
    if not isinstance(body, dict):
        raise ArgumentError("body", "expected a JSON object", type(body).__name__)
    if name not in body or body[name] is None:
        if default is ...:
            raise ArgumentError(name, "is required")
        return default
    value = body[name]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ArgumentError(name, f"expected {kind.__name__}", value)
    return value


def spec_data(body: Any) -> Any:
    """The raw spec mapping of ``body["spec_yaml"]`` (YAML text, strict: duplicate keys, aliases)."""
    text = field_of(body, "spec_yaml", str)
    return parse_yaml(text, "spec") if text.strip() else None


def read_spec(body: Any, notes: Optional[list[str]] = None):
    """``body["spec_yaml"]`` as a validated Spec (the CLI's rules; notes: what a HF config could not map)."""
    return spec_from_data(spec_data(body), "spec", base_dir=os.getcwd(), notes=notes)


def read_spec_at(body: Any):
    """:func:`read_spec`, at ``body["num_gpus"]`` GPUs when given (a plan of the GPU frontier: the spec with
    ``cluster.num_gpus`` replaced, as the planner builds each count's problem, solver/problem.py)."""
    spec = read_spec(body)
    num_gpus = field_of(body, "num_gpus", int, None)
    if num_gpus is None or num_gpus == spec.cluster.num_gpus:
        return spec
    if num_gpus < 1:
        raise ArgumentError("num_gpus", "must be a positive GPU count", num_gpus)
    return spec.at_gpus(num_gpus)


def validate(body: Any) -> dict[str, Any]:
    """``{"ok": true, "warnings": [...]}`` for a valid spec (its plan's shape checked too, as ``validate``)."""
    from parplan.costmodel.spec.spec import spec_warnings

    notes: list[str] = []
    spec = read_spec(body, notes)
    if spec.plan is not None:
        from parplan.library.evaluation import evaluate_spec

        evaluate_spec(spec)
    return {"ok": True, "warnings": notes + spec_warnings(spec), "num_gpus": spec.cluster.num_gpus}


def _with_gpus(entry: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """A plan entry with ``num_gpus`` (tp·cp·pp·dp), what the GPU frontier's x axis reads."""
    if entry is not None:
        p = entry["plan"]
        entry["num_gpus"] = p["tp"] * p["cp"] * p["pp"] * p["dp"]
    return entry


def optimize(body: Any) -> dict[str, Any]:
    """``optimize --format json`` of the spec: top ``top_k`` plans, the ``pareto`` frontier ("memory", "gpus" or
    none), the explanation with its relaxations when nothing fits; each plan entry also has ``num_gpus``."""
    from parplan.library.api import optimize as library_optimize
    from parplan.library.contract import plan_result_to_dict
    from parplan.solver.arguments import check_optimize_arguments
    from parplan.costmodel.spec.spec import spec_warnings

    top_k = field_of(body, "top_k", int, 5)
    pareto = field_of(body, "pareto", str, None) or None
    time_limit_s = field_of(body, "time_limit_s", float, 60.0)
    if not 0 < time_limit_s <= MAX_UI_TIME_LIMIT_S:
        raise ArgumentError("time_limit_s", f"must be in (0, {MAX_UI_TIME_LIMIT_S:g}] seconds", time_limit_s)
    check_optimize_arguments(top_k=top_k, method="cpsat", pareto=pareto, time_limit_s=time_limit_s, workers=0,
                             seed=1, deterministic=False)
    notes: list[str] = []
    spec = read_spec(body, notes)
    out = plan_result_to_dict(library_optimize(spec, top_k=top_k, pareto=pareto, time_limit_s=time_limit_s))
    for key in ("plans", "pareto"):
        out[key] = [_with_gpus(e) for e in out[key]]
    for relaxation in (out["explanation"] or {}).get("relaxations", []):
        _with_gpus(relaxation["plan"])
    out["warnings"] = notes + spec_warnings(spec, pareto=pareto)
    return out


def plan_view(body: Any) -> dict[str, Any]:
    """One plan of the spec (``body["plan"]``: plan keys; absent: the spec's ``plan:``) evaluated: its CONTRACT
    entry with each stage's headroom, the memory ledger's parts and the pipeline timeline."""
    from parplan.library.api import evaluate
    from parplan.library.contract import plan_entry
    from parplan.client.ui.timeline import timeline

    spec = read_spec_at(body)
    plan = field_of(body, "plan", dict, None)
    evaluation = evaluate(spec, plan)
    entry = _with_gpus(plan_entry(evaluation, headroom=True))
    entry["timeline"] = timeline(spec, evaluation)
    return entry


def apply_patch(body: Any) -> dict[str, Any]:
    """The spec text with ``body["patch"]`` applied (dotted keys -> values, as a relaxation's ``patch`` or a
    preset's ``{"model": {"preset": NAME}}``). A valid spec must stay valid (else the error names the field); a
    spec still being written (empty, or invalid before the patch) is patched as it is."""
    data = spec_data(body)
    try:
        spec_from_data(data, "spec", base_dir=os.getcwd())
        was_valid = True
    except ParplanError:
        was_valid = False
    patch = field_of(body, "patch", dict)
    data = copy.deepcopy(data) if isinstance(data, dict) else {}
    for key, value in patch.items():
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise ArgumentError("patch", "keys are dotted spec fields such as cluster.num_gpus", key)
        node = data
        for part in key.split(".")[:-1]:
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise ArgumentError("patch", f"{key}: {part} is not a section", key)
            node = node[part]
        node[key.split(".")[-1]] = copy.deepcopy(value)
    if was_valid:
        spec_from_data(data, "spec", base_dir=os.getcwd())
    return {"spec_yaml": yaml.safe_dump(data, sort_keys=False, allow_unicode=True)}


def hf_import(body: Any) -> dict[str, Any]:
    """The spec text with its model section replaced by a Hugging Face ``config.json`` (``body["config_json"]``,
    its text or parsed object) mapped by :func:`parplan.library.huggingface.model_from_hf_config`."""
    from parplan.library.huggingface import model_from_hf_config

    config = body.get("config_json") if isinstance(body, dict) else None
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError as err:
            raise SpecError(f"config_json: not JSON ({err})") from None
    if not isinstance(config, dict):
        raise ArgumentError("config_json", "expected a config.json object", type(config).__name__)
    name = field_of(body, "name", str, None)
    mapped = model_from_hf_config(config, name=name or str(config.get("model_type") or "hf-model"),
                                  where="config_json")
    patched = apply_patch({"spec_yaml": field_of(body, "spec_yaml", str), "patch": {"model": mapped.fields}})
    return {**patched, "warnings": list(mapped.warnings)}


def presets() -> dict[str, Any]:
    """The model presets (library/model_presets.yaml): name, source and the model's shape."""
    from parplan.library.presets import load_presets

    return {"presets": [{"name": name, "source": entry["source"], "model": entry["model"]}
                        for name, entry in load_presets().items()]}


def export(body: Any) -> dict[str, Any]:
    """A plan's framework export (``target``: megatron, bridge, torchtitan, deepspeed) or job file (``launcher``:
    slurm, pytorchjob, volcano), as ``solver-cli optimize --export/--emit`` writes it."""
    from parplan.library.api import evaluate
    from parplan.client.export_cli import build_export
    from parplan.frameworks.export import TARGETS
    from parplan.frameworks.jobs import LAUNCHERS

    target = field_of(body, "target", str, None)
    launcher = field_of(body, "launcher", str, None)
    if target is not None and target not in TARGETS:
        raise ArgumentError("target", f"must be one of {', '.join(TARGETS)}", target)
    if launcher is not None and launcher not in LAUNCHERS:
        raise ArgumentError("launcher", f"must be one of {', '.join(LAUNCHERS)}", launcher)
    spec = read_spec_at(body)
    evaluation = evaluate(spec, field_of(body, "plan", dict, None))
    done = build_export(spec, evaluation.plan, target, launcher)
    return {"filename": done.filename, "text": done.text, "warnings": list(done.warnings)}


def _sweep_records(folder: str) -> list[dict[str, Any]]:
    """A sweep folder's records: from its manifest and store (every point solved so far, the rest PENDING: what
    a running sweep has), else from its ``points.jsonl``."""
    from parplan.library.sweep.run import records_from
    from parplan.library.sweep.store import MANIFEST, Store

    if os.path.isfile(os.path.join(folder, MANIFEST)):
        store = Store(folder)
        try:
            return records_from(store.read_manifest(), store)[0]
        except (KeyError, TypeError, IndexError) as err:
            raise ArgumentError("folder", f"{MANIFEST} is not a sweep's manifest (missing {err})", folder) from None
    path = os.path.join(folder, "points.jsonl")
    if not os.path.isfile(path):
        raise ArgumentError("folder", "has neither sweep.json nor points.jsonl (the folder `solver-cli sweep --out` "
                            "writes)", folder)
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    raise ArgumentError("folder", f"points.jsonl line {n} is not JSON", folder) from None
    return records


SWEEP_POINT_KEYS = ("index", "model", "gpu", "num_gpus", "status", "tokens_per_s", "mfu", "time_to_train_h",
                    "gpu_hours", "cost_usd", "pareto", "knee", "scaling_efficiency", "axes")


def sweep(body: Any) -> dict[str, Any]:
    """A sweep folder (``solver-cli sweep --out DIR``, also while it runs): its points, the cost x time Pareto set
    and the scaling curves by :func:`parplan.library.sweep.records.finish`, and how many points are solved."""
    from parplan.library.sweep.records import finish, short_plan

    from parplan.client.ui.sweep_runs import status_of

    folder = os.path.expanduser(field_of(body, "folder", str))
    run = status_of(folder)
    if run["running"] and not os.path.isfile(os.path.join(folder, "sweep.json")):
        return {"points": [], "solved": 0, "total": None, "curves": [], "pareto": [], "pareto_axis": None, **run}
    records = _sweep_records(folder)
    try:
        summary = finish(records)
        points = [{k: r.get(k) for k in SWEEP_POINT_KEYS}
                  | {"plan": short_plan(r["plans"][0]["plan"]) if r.get("plans") else None} for r in records]
    except (KeyError, TypeError, IndexError) as err:
        raise ArgumentError("folder", f"points.jsonl is not a sweep's records (missing {err})", folder) from None
    solved = sum(r["status"] != "PENDING" for r in records)
    return {"points": points, "solved": solved, "total": len(records), **summary, **run}


def error_body(err: ParplanError) -> dict[str, Any]:
    """The 400 answer: the one-line message and the field it names."""
    return {"error": str(err), "field": err.field}


__all__ = ["field_of", "read_spec", "read_spec_at", "validate", "optimize", "plan_view", "apply_patch", "hf_import", "presets", "export", "sweep",
           "error_body", "MAX_UI_TIME_LIMIT_S"]
