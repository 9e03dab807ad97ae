"""The ``Sweep`` RPC: a capacity sweep (parplan.library.sweep) streamed point by point as the engine finishes them.

:func:`sweep_stream` is the handler's body (service.py frames it: slot, request id, log line); it runs
``run_sweep`` on a thread with the call's cancel event, so a client that cancels (or whose deadline passes)
stops the sweep's solves. :func:`point_message` is the conversion of one record. Nothing is stored on the
server: the client gets every record and the summary in the stream.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
from typing import Any, Callable, Iterator, NoReturn, Optional

from google.protobuf import struct_pb2
from google.rpc import code_pb2

from parplan import __version__
from parplan.library.spec_io import MAX_SPEC_BYTES, parse_yaml
from parplan.library.sweep.engines import ENGINES, Cancelled, EngineUnavailable
from parplan.library.sweep.points import SweepError, load_sweep
from parplan.library.sweep.run import run_sweep
from parplan.server.admission import Abort, plain_status
from parplan.v1 import planner_pb2 as pb


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def cgroup_cpus(cpu_max_path: str = "/sys/fs/cgroup/cpu.max") -> int:
    """CPUs this process may use: its affinity mask (os.sched_getaffinity), capped by the cgroup v2 quota
    (/sys/fs/cgroup/cpu.max, "quota period", rounded up; "max" is no cap). A request's ``jobs`` above it gets
    this many (docs: kernel.org admin-guide/cgroup-v2 "cpu.max")."""
    import math
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        with open(cpu_max_path) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


SWEEP_WORKER_MEMORY_MIB = 512
"""Each worker process of a Sweep (the local engine) solves under this budget: the interpreter, NumPy and
OR-Tools take ~150 MiB (a 70B/64-GPU point peaks at 152 MiB), the rest is its solve's room."""


def sweep_jobs(requested: int, workers_per_point: int) -> int:
    """Worker processes for a Sweep: the request's ``jobs`` (0: one per ``workers_per_point`` CPUs), at most the
    CPUs the cgroup gives (:func:`cgroup_cpus`) and at most as many :data:`SWEEP_WORKER_MEMORY_MIB` budgets as the
    server's memory budget has room for beside its RSS and what the calls in flight hold (solver/deadline.py's
    ledger); none fits: RESOURCE_EXHAUSTED (retry when other calls have ended)."""
    from parplan.solver.deadline import LEDGER, MIB, default_memory_budget_mib, rss_bytes

    cpus = cgroup_cpus()
    jobs = min(requested, cpus) if requested else max(1, cpus // max(1, workers_per_point))
    room = default_memory_budget_mib() * MIB - rss_bytes() - LEDGER.held_bytes()
    affordable = room // (SWEEP_WORKER_MEMORY_MIB * MIB)
    if affordable < 1:
        raise Abort(plain_status(code_pb2.RESOURCE_EXHAUSTED, (
            f"the server's memory budget ({default_memory_budget_mib()} MiB) has no room for a sweep worker "
            f"({SWEEP_WORKER_MEMORY_MIB} MiB) beside the calls in flight; retry with backoff")))
    return int(min(jobs, affordable))


def point_message(record: dict[str, Any], done: int, total: int) -> pb.SweepPoint:
    axes = struct_pb2.Struct()
    axes.update(json.loads(json.dumps(record["axes"], default=str)))
    return pb.SweepPoint(index=record["index"], key=record["key"], status=record["status"], axes=axes,
                         record_json=_json(record), done=done, total=total)


MAX_SERVER_POINTS = 4_096
"""Points one Sweep RPC may ask for (the CLI's own cap is library/sweep/spec.py MAX_POINTS): counted from the axes'
sizes (their product) plus ``points`` before anything is expanded or validated."""


def count_points(data: dict[str, Any]) -> int:
    """The sweep's point count from its axes' sizes, or a SweepError naming the field past MAX_SERVER_POINTS."""
    import math

    axes = data.get("axes") if isinstance(data.get("axes"), dict) else {}
    sizes = [len(v) if isinstance(v, list) else 1 for v in axes.values()]
    grid_points = math.prod(sizes) if sizes else 0
    listed = len(data["points"]) if isinstance(data.get("points"), list) else 0
    if grid_points + listed > MAX_SERVER_POINTS:
        field = "axes" if grid_points > listed else "points"
        raise SweepError(f"{field}: {grid_points + listed} points (a Sweep RPC takes at most {MAX_SERVER_POINTS})")
    return grid_points + listed


def read_request(request: pb.SweepRequest, server_engine: str = "local"):
    """The request's sweep mapping and engine, checked cheaply before admission (size, fields, aliases, point
    count): a SweepError (INVALID_ARGUMENT) naming the field otherwise. :func:`load_request_sweep` validates the
    points, after admission and under the call's deadline. The engine is the server's (``solver-cli serve
    --sweep-engine``): a request may leave it empty or name the same one."""
    if len(request.sweep_text.encode()) > MAX_SPEC_BYTES:
        raise SweepError(f"sweep_text: larger than {MAX_SPEC_BYTES // 2**20} MiB")
    if request.ray_address:
        raise SweepError("ray_address: the server connects to no address a request names (the engine is the "
                         "server's configuration; `solver-cli sweep --ray-address` runs one locally)")
    engine = request.engine or server_engine
    if engine not in ENGINES:
        raise SweepError(f"engine: {engine!r} is not one of {', '.join(ENGINES)}")
    if engine != server_engine:
        raise SweepError(f"engine: {engine!r}: this server runs sweeps on {server_engine!r} (its own "
                         "configuration, solver-cli serve --sweep-engine); leave engine empty")
    if request.jobs < 0 or request.jobs > 4096:
        raise SweepError(f"jobs: {request.jobs} is out of range (0-4096)")
    data = parse_yaml(request.sweep_text, "sweep_text") if request.sweep_text.strip() else None
    if not isinstance(data, dict):
        raise SweepError("sweep_text: a sweep mapping (base, axes, budget, ...) is required")
    count_points(data)
    if not isinstance(data.get("base"), dict):
        raise SweepError("sweep_text: base must be an inline spec mapping (the server reads no files)")
    return data, engine


def load_request_sweep(data: dict[str, Any], cancel: threading.Event,
                       time_remaining_s: Callable[[], Optional[float]]):
    """The sweep's points resolved and validated, the deadline checked between points (Abort
    DEADLINE_EXCEEDED / CANCELLED), the per-point solver time limit capped by the call's remaining time."""
    def check() -> None:
        stop_if_ended(cancel, time_remaining_s)

    sweep = load_sweep(without_files(data), check=check)
    remaining = time_remaining_s()
    if remaining is not None and remaining < sweep.spec.solver.time_limit_s:
        solver = sweep.spec.solver.model_copy(update={"time_limit_s": max(0.1, float(remaining))})
        sweep = dataclasses.replace(sweep, spec=sweep.spec.model_copy(update={"solver": solver}))
    return sweep


def stop_if_ended(cancel: threading.Event, time_remaining_s: Callable[[], Optional[float]]) -> None:
    """Abort the call if its deadline has passed (DEADLINE_EXCEEDED) or it was cancelled (CANCELLED)."""
    remaining = time_remaining_s()
    if remaining is not None and remaining <= 0:
        raise Abort(plain_status(code_pb2.DEADLINE_EXCEEDED, "deadline exceeded while validating the sweep"))
    if cancel.is_set():
        raise Abort(plain_status(code_pb2.CANCELLED, "client cancelled"))


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
    out["base"] = expand_request_model(data["base"], None, where="base.model")

    def model_value(value: Any, where: str) -> Any:
        if isinstance(value, str) and value.lower().endswith(".json"):
            raise SweepError(f"{where}: value {value!r}: the server reads no files (give a mapping with "
                             "hf_config_json, or a preset name)")
        return expand_request_model({"model": value}, None, where=where)["model"] if isinstance(value, dict) else value

    if isinstance(data.get("axes"), dict) and isinstance(data["axes"].get("model"), list):
        out["axes"] = {**data["axes"], "model": [model_value(v, f"axes.model[{i}]") for i, v in enumerate(data["axes"]["model"])]}
    if isinstance(data.get("points"), list):
        out["points"] = [{**point, "model": model_value(point["model"], f"points[{i}].model")}
                         if isinstance(point, dict) and "model" in point else point
                         for i, point in enumerate(data["points"])]
    return out


def _deadline_timer(left_s: Optional[float], deadline_hit: threading.Event,
                    cancel: threading.Event) -> Optional[threading.Timer]:
    """A started timer that sets ``deadline_hit`` and ``cancel`` just past the call's deadline (so that the call's
    own clock reads it as passed too: DEADLINE_EXCEEDED, not CANCELLED); None without a deadline. The engine stops
    at the deadline itself, not when gRPC's callback comes."""
    if left_s is None:
        return None

    def deadline_passed() -> None:
        deadline_hit.set()
        cancel.set()

    at_deadline = threading.Timer(max(0.0, left_s) + 0.02, deadline_passed)
    at_deadline.daemon = True
    at_deadline.start()
    return at_deadline


def _raise_engine_error(err: BaseException, deadline_passed: bool, cancel: threading.Event,
                        time_remaining_s: Callable[[], Optional[float]]) -> NoReturn:
    """The call's end for an error the sweep's engine raised: a missing engine is the caller's (SweepError), a
    stop is DEADLINE_EXCEEDED or CANCELLED (the call's deadline passed or it was cancelled), anything else as is."""
    if isinstance(err, EngineUnavailable):
        raise SweepError(str(err))
    if isinstance(err, Cancelled):
        if deadline_passed:
            raise Abort(plain_status(code_pb2.DEADLINE_EXCEEDED, "deadline exceeded during the sweep"))
        stop_if_ended(cancel, time_remaining_s)
        raise Abort(plain_status(code_pb2.CANCELLED, "sweep cancelled"))
    raise err


def sweep_stream(sweep, engine: str, request: pb.SweepRequest, cancel: threading.Event,
                 extra: dict[str, Any], time_remaining_s: Callable[[], Optional[float]] = lambda: None
                 ) -> Iterator[pb.SweepResponse]:
    """The sweep's points as they finish, then its summary (the handler's body, after admission)."""
    total = len(sweep.points)
    events: "queue.Queue[tuple[str, Any]]" = queue.Queue()

    from parplan.library.sweep.run import settings_of
    from parplan.solver.deadline import LEDGER, MIB

    jobs = sweep_jobs(request.jobs, settings_of(sweep)["workers"])

    def run() -> None:
        try:
            with LEDGER.hold_outside(jobs * SWEEP_WORKER_MEMORY_MIB * MIB):  # the workers' budgets are the server's
                events.put(("done", run_sweep(sweep, None, engine=engine, jobs=jobs,
                                              on_point=lambda r: events.put(("point", r)), cancel=cancel,
                                              worker_memory_budget_mib=SWEEP_WORKER_MEMORY_MIB)))
        except BaseException as err:  # handed to the call's thread
            events.put(("error", err))

    worker = threading.Thread(target=run, name="sweep", daemon=True)
    deadline_hit = threading.Event()
    at_deadline = _deadline_timer(time_remaining_s(), deadline_hit, cancel)
    worker.start()
    done = 0
    try:
        while True:
            kind, value = events.get()
            if kind == "point":
                done += 1
                yield pb.SweepResponse(point=point_message(value, done, total))
            elif kind == "error":
                _raise_engine_error(value, deadline_hit.is_set(), cancel, time_remaining_s)
            else:
                records, summary, counts = value
                extra.update(points=total, failed=counts["failed"])
                yield pb.SweepResponse(summary=pb.SweepSummary(
                    records_jsonl="".join(_json(r) + "\n" for r in records), summary_json=_json(summary),
                    points=total, failed=counts["failed"], parplan_version=__version__))
                return
    finally:  # the slot is released only once the sweep has stopped
        cancel.set()
        if at_deadline is not None:
            at_deadline.cancel()
        worker.join()


__all__ = ["cgroup_cpus", "sweep_jobs", "load_request_sweep", "sweep_stream", "point_message", "read_request"]
