"""The ``Sweep`` RPC: a capacity sweep (parplan.client.sweep) streamed point by point as the engine finishes them.

:func:`sweep_stream` is the handler's body (service.py frames it: slot, request id, log line); it runs
``run_sweep`` on a thread with the call's cancel event, so a client that cancels (or whose deadline passes)
stops the sweep's solves. :func:`point_message` is the conversion of one record. Nothing is stored on the
server: the client gets every record and the summary in the stream.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import Any, Iterator

from google.protobuf import struct_pb2

from parplan.client.spec_io import MAX_SPEC_BYTES, parse_yaml
from parplan.client.sweep.engines import ENGINES, EngineUnavailable
from parplan.client.sweep.points import SweepError, load_sweep
from parplan.client.sweep.run import run_sweep
from parplan.v1 import planner_pb2 as pb


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def point_message(record: dict[str, Any], done: int, total: int) -> pb.SweepPoint:
    axes = struct_pb2.Struct()
    axes.update(json.loads(json.dumps(record["axes"], default=str)))
    return pb.SweepPoint(index=record["index"], key=record["key"], status=record["status"], axes=axes,
                         record_json=_json(record), done=done, total=total)


def read_request(request: pb.SweepRequest):
    """The request's sweep, checked: a SweepError (INVALID_ARGUMENT) naming the field otherwise."""
    if len(request.sweep_text.encode()) > MAX_SPEC_BYTES:
        raise SweepError(f"sweep_text: larger than {MAX_SPEC_BYTES // 2**20} MiB")
    engine = request.engine or "local"
    if engine not in ENGINES:
        raise SweepError(f"engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if request.jobs < 0 or request.jobs > 4096:
        raise SweepError(f"jobs: {request.jobs} is out of range (0-4096)")
    data = parse_yaml(request.sweep_text, "sweep_text") if request.sweep_text.strip() else None
    if not isinstance(data, dict):
        raise SweepError("sweep_text: a sweep mapping (base, axes, budget, ...) is required")
    if not isinstance(data.get("base"), dict):
        raise SweepError("sweep_text: base must be an inline spec mapping (the server reads no files)")
    return load_sweep(without_files(data)), engine


def without_files(data: dict[str, Any]) -> dict[str, Any]:
    """The sweep with every model source resolved as the Plan RPC resolves a spec's (service.py
    ``expand_request_model``: inline ``hf_config_json`` and presets; no path is ever opened): an ``hf_config``
    anywhere, or a ``model`` axis value naming a config.json file, is a SweepError naming where it stands."""
    from parplan.server.requests import expand_request_model

    def refuse_paths(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "hf_config":
                    raise SweepError(f"{where}{key}: the server reads no files (give model.hf_config_json "
                                     "inline, or a preset)")
                refuse_paths(value, f"{where}{key}.")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                refuse_paths(value, f"{where.rstrip('.')}[{i}].")

    refuse_paths(data, "")
    out = dict(data)
    out["base"] = expand_request_model(data["base"], None)

    def model_value(value: Any, where: str) -> Any:
        if isinstance(value, str) and value.lower().endswith(".json"):
            raise SweepError(f"{where}: value {value!r}: the server reads no files (give a mapping with "
                             "hf_config_json, or a preset name)")
        return expand_request_model({"model": value}, None)["model"] if isinstance(value, dict) else value

    if isinstance(data.get("axes"), dict) and isinstance(data["axes"].get("model"), list):
        out["axes"] = {**data["axes"], "model": [model_value(v, "axes.model") for v in data["axes"]["model"]]}
    if isinstance(data.get("points"), list):
        out["points"] = [{**point, "model": model_value(point["model"], f"points[{i}].model")}
                         if isinstance(point, dict) and "model" in point else point
                         for i, point in enumerate(data["points"])]
    return out


def sweep_stream(sweep, engine: str, request: pb.SweepRequest, cancel: threading.Event,
                 extra: dict[str, Any]) -> Iterator[pb.SweepResponse]:
    """The sweep's points as they finish, then its summary (the handler's body, after admission)."""
    total = len(sweep.points)
    events: "queue.Queue[tuple[str, Any]]" = queue.Queue()

    def run() -> None:
        try:
            events.put(("done", run_sweep(sweep, None, engine=engine, jobs=request.jobs or None,
                                          ray_address=request.ray_address or None,
                                          on_point=lambda r: events.put(("point", r)), cancel=cancel)))
        except BaseException as err:  # handed to the call's thread
            events.put(("error", err))

    worker = threading.Thread(target=run, name="sweep", daemon=True)
    worker.start()
    done = 0
    try:
        while True:
            kind, value = events.get()
            if kind == "point":
                done += 1
                yield pb.SweepResponse(point=point_message(value, done, total))
            elif kind == "error":
                if isinstance(value, EngineUnavailable):
                    raise SweepError(str(value))
                raise value
            else:
                records, summary, counts = value
                extra.update(points=total, failed=counts["failed"])
                yield pb.SweepResponse(summary=pb.SweepSummary(
                    records_jsonl="".join(_json(r) + "\n" for r in records), summary_json=_json(summary),
                    points=total, failed=counts["failed"]))
                return
    finally:  # the slot is released only once the sweep has stopped
        cancel.set()
        worker.join()


__all__ = ["sweep_stream", "point_message", "read_request"]
