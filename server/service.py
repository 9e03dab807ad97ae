"""``PlannerService``: a thin adapter from parplan.v1 requests to the library and back.

Each call: check the concurrency slot (RESOURCE_EXHAUSTED when all are busy: no queue), read the spec
(typed or text) with the same loader as the CLI, run ``optimize`` / ``evaluate_spec`` with
:class:`SolverControls` whose time limit the call's deadline caps and whose ``cancel`` event the call's
termination sets (client cancellation, deadline, server shutdown), and map the CONTRACT dict of the answer
onto the proto (:mod:`parplan.server.convert`). Bad input of any kind becomes INVALID_ARGUMENT with a
``google.rpc.BadRequest`` naming the field, in one place: :func:`invalid_argument`.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import re
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from parplan.client.contract import evaluation_to_dict, plan_entry, plan_result_to_dict
from parplan.client.evaluation import evaluate_spec
from parplan.client.spec_io import MAX_SPEC_BYTES, SpecError, one_line, parse_yaml, spec_from_data
from parplan.costmodel.evaluate import PlanError
from parplan.costmodel.hardware import UnknownGPU
from parplan.costmodel.spec import Spec
from parplan.server import convert
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["PlannerService"].full_name  # "parplan.v1.PlannerService"

# The library's input errors. When costmodel/errors.py's common base lands this is `(ParplanError,)`.
LIBRARY_ERRORS: tuple[type[Exception], ...] = (SpecError, PlanError, UnknownGPU)

DEFAULT_TIME_LIMIT_S = 60.0  # as `solver-cli optimize --time-limit`
MIN_TIME_LIMIT_S = 0.01  # as the CLI's lower bound
MAX_TIME_LIMIT_S = 600.0  # a server-side cap: a call cannot hold a solver slot longer
DEADLINE_MARGIN_S = 0.25  # time kept back from the deadline to re-evaluate and send the answer
MAX_TOP_K = 100  # as `solver-cli optimize --top`
_PATH = re.compile(r"^((?:[A-Za-z_][\w-]*|\[[^\]]*\])(?:\.[A-Za-z_][\w-]*|\[[^\]]*\])*): ")

log = logging.getLogger("parplan.server")


class RequestError(ValueError):
    """A request field outside the service's rules (not the spec's: those are SpecError)."""

    def __init__(self, field_path: str, message: str):
        self.field_path = field_path
        super().__init__(f"{field_path}: {message}")


def field_violation(err: Exception, source_field: str) -> error_details_pb2.BadRequest.FieldViolation:
    """The request field an error names. Spec errors start with the path inside the spec (``model.num_layers:
    ...``); a typed spec's path is prefixed by ``spec.``, a text spec's errors all name ``spec_text``."""
    message = one_line(str(err))
    field = getattr(err, "field_path", None)
    if field is None:
        match = _PATH.match(message)
        inner = match.group(1) if match else ""
        if source_field == "spec_text" or inner in ("", "spec", "spec_text"):
            field = source_field
        elif inner.startswith("plan") and source_field == "plan":
            field = inner
        else:
            field = f"{source_field}.{inner}"
    return error_details_pb2.BadRequest.FieldViolation(field=field, description=message)


def invalid_argument(err: Exception, source_field: str) -> status_pb2.Status:
    """THE mapping of bad input to a gRPC status: INVALID_ARGUMENT with a google.rpc.BadRequest."""
    violation = field_violation(err, source_field)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=violation.description, details=[detail])


def internal_error(err: Exception) -> status_pb2.Status:
    log_event("internal_error", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc())
    return status_pb2.Status(code=code_pb2.INTERNAL, message=f"internal error ({type(err).__name__}): "
                                                            f"{one_line(str(err))}")


class _Abort(Exception):
    def __init__(self, status: status_pb2.Status):
        self.status = status


def _code_name(code: int) -> str:
    return code_pb2.Code.Name(code)


# ------------------------------------------------------------------------------------------- requests


def _spec_source(request: Any) -> str:
    source = request.WhichOneof("spec_source")
    if source is None:
        raise RequestError("spec_source", "set spec (typed) or spec_text (the YAML or JSON of a spec file)")
    return source


def spec_data(request: Any) -> tuple[str, dict[str, Any]]:
    """(the request field the spec came from, the spec as a dict) of a request."""
    source = _spec_source(request)
    if source == "spec":
        return source, convert.spec_dict_from_message(request.spec)
    text = request.spec_text
    if len(text.encode("utf-8")) > MAX_SPEC_BYTES:
        raise RequestError("spec_text", f"larger than {MAX_SPEC_BYTES // 2**20} MiB; not a spec file")
    if not text.strip():
        raise SpecError("spec_text: empty spec (expected a mapping with model, training and cluster)")
    return source, parse_yaml(text, "spec_text")


def read_spec(request: Any, plan: Optional[dict[str, Any]] = None) -> tuple[str, Spec]:
    source, data = spec_data(request)
    if plan is not None and isinstance(data, dict):
        data = {**data, "plan": plan}
    return source, spec_from_data(data, name=source)


def solver_parameters(params: pb.SolverParameters, context: grpc.ServicerContext) -> dict[str, Any]:
    """The effective solver parameters of a call: the request's (or the CLI's defaults), the time limit capped
    by the server's maximum and by the call's remaining deadline."""
    given = convert.message_to_dict(params, omit_unset=True, path="solver")
    limit = given.get("time_limit_s", DEFAULT_TIME_LIMIT_S)
    if not math.isfinite(limit) or limit < MIN_TIME_LIMIT_S:
        raise RequestError("solver.time_limit_s", f"must be a finite number >= {MIN_TIME_LIMIT_S} (got {limit!r})")
    workers = given.get("workers", 0)
    if workers < 0:
        raise RequestError("solver.workers", f"must be >= 0 (0: all cores), got {workers}")
    limit = min(limit, MAX_TIME_LIMIT_S)
    remaining = context.time_remaining()
    if remaining is not None:
        limit = min(limit, max(MIN_TIME_LIMIT_S, remaining - DEADLINE_MARGIN_S))
    return {"method": given.get("method", "cpsat"), "time_limit_s": limit, "workers": workers,
            "deterministic": given.get("deterministic", False), "seed": given.get("seed", 1)}


def _top_k(request: Any) -> int:
    top_k = request.top_k if request.HasField("top_k") else 1
    if not 1 <= top_k <= MAX_TOP_K:
        raise RequestError("top_k", f"must be between 1 and {MAX_TOP_K}, got {top_k}")
    return top_k


def _pareto_axis(number: int, field: str) -> Optional[str]:
    return convert.enum_to_value(pb.ParetoAxis.DESCRIPTOR, number, field)


# -------------------------------------------------------------------------------------------- service


@dataclass
class CallState:
    """What one call holds: its id, its cancel event (set when the call ends for any reason)."""

    request_id: str
    method: str
    cancel: threading.Event
    started: float


class PlannerServicer(pb_grpc.PlannerServiceServicer):
    """The four RPCs over ``optimize`` / ``evaluate_spec``, at most ``max_concurrent`` at a time."""

    def __init__(self, max_concurrent: int):
        self.max_concurrent = max_concurrent
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._lock = threading.Lock()
        self.active_calls = 0  # calls holding a slot (tests and the load benchmark read it)
        self.draining = threading.Event()

    # -- the frame around every call: slot, request id, cancellation, errors, one log line

    def _begin(self, context: grpc.ServicerContext, method: str) -> CallState:
        request_id = _request_id(context)
        context.send_initial_metadata((("x-request-id", request_id),))
        cancel = threading.Event()
        if not context.add_callback(cancel.set):
            cancel.set()  # the call has already ended
        return CallState(request_id, method, cancel, time.perf_counter())

    def _acquire(self, state: CallState) -> None:
        if self.draining.is_set():
            raise _Abort(status_pb2.Status(code=code_pb2.UNAVAILABLE, message="server is shutting down"))
        if not self._slots.acquire(blocking=False):
            raise _Abort(status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message=(
                f"all {self.max_concurrent} solver slots are busy; retry with backoff")))
        with self._lock:
            self.active_calls += 1

    def _release(self) -> None:
        with self._lock:
            self.active_calls -= 1
        self._slots.release()

    def _finish(self, context: grpc.ServicerContext, state: CallState, status: Optional[status_pb2.Status],
                extra: dict[str, Any], abort: bool = True) -> None:
        code = "OK" if status is None else _code_name(status.code)
        if status is None and state.cancel.is_set() and context.is_active() is False:  # the answer was not sent
            remaining = context.time_remaining()
            code = "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"
        log_event("rpc", request_id=state.request_id, method=state.method, peer=context.peer(), code=code,
                  latency_ms=round(1e3 * (time.perf_counter() - state.started), 2),
                  **({"error": status.message} if status is not None and status.code != code_pb2.OK else {}), **extra)
        if status is not None and abort:
            context.abort_with_status(rpc_status.to_status(status))

    def _unary(self, request: Any, context: grpc.ServicerContext, method: str,
               body: Callable[[CallState], tuple[Any, dict[str, Any]]]) -> Any:
        state = self._begin(context, method)
        status, response, extra = None, None, {}
        try:
            self._acquire(state)
            try:
                response, extra = body(state)
            finally:
                self._release()
        except _Abort as abort:
            status = abort.status
        except LIBRARY_ERRORS + (RequestError, convert.ConversionError) as err:
            status = invalid_argument(err, _source_field(request, err))
        except Exception as err:  # a bug: INTERNAL with one line, logged; the server keeps serving
            status = internal_error(err)
        self._finish(context, state, status, extra)
        return response

    # -- the RPCs

    def Plan(self, request: pb.PlanRequest, context: grpc.ServicerContext) -> pb.PlanResponse:
        def body(state: CallState):
            _, spec = read_spec(request)
            params = solver_parameters(request.solver, context)
            result = optimize(spec, method=params["method"], top_k=_top_k(request),
                              pareto=_pareto_axis(request.pareto_axis, "pareto_axis"),
                              controls=_controls(params, state.cancel))
            return convert.plan_response(plan_result_to_dict(result), params), _result_fields(result)

        return self._unary(request, context, "Plan", body)

    def Evaluate(self, request: pb.EvaluateRequest, context: grpc.ServicerContext) -> pb.EvaluateResponse:
        def body(state: CallState):
            plan = convert.plan_spec_dict_from_message(request.plan) if request.HasField("plan") else None
            _, spec = read_spec(request, plan)
            data = evaluation_to_dict(evaluate_spec(spec))
            response = convert.fill_message(pb.EvaluateResponse(), {"status": data["status"],
                                                                    "evaluation": data["plans"][0]})
            return response, {"plan_status": data["status"]}

        return self._unary(request, context, "Evaluate", body)

    def Pareto(self, request: pb.ParetoRequest, context: grpc.ServicerContext) -> pb.ParetoResponse:
        def body(state: CallState):
            _, spec = read_spec(request)
            axis = _pareto_axis(request.axis, "axis")
            if axis is None:
                raise RequestError("axis", "set PARETO_AXIS_MEMORY or PARETO_AXIS_GPUS")
            params = solver_parameters(request.solver, context)
            result = optimize(spec, method=params["method"], pareto=axis, controls=_controls(params, state.cancel))
            data = plan_result_to_dict(result)
            response = convert.fill_message(pb.ParetoResponse(), {
                "status": data["status"], "axis": axis, "points": data["pareto"], "solver": data["solver"],
                "parameters": params, "timing": data.get("timing")})
            return convert.set_deprecated_fields(response), _result_fields(result)

        return self._unary(request, context, "Pareto", body)

    def PlanStream(self, request: pb.PlanStreamRequest, context: grpc.ServicerContext) -> Iterator[pb.PlanStreamResponse]:
        state = self._begin(context, "PlanStream")
        status, extra = None, {}
        try:
            self._acquire(state)
            try:
                yield from self._stream(request, context, state, extra)
            finally:
                self._release()
        except _Abort as abort:
            status = abort.status
        except LIBRARY_ERRORS + (RequestError, convert.ConversionError) as err:
            status = invalid_argument(err, _source_field(request, err))
        except GeneratorExit:  # the client went away mid-stream
            self._finish(context, state, status_pb2.Status(code=code_pb2.CANCELLED, message="client cancelled"),
                         extra, abort=False)
            raise
        except Exception as err:
            status = internal_error(err)
        self._finish(context, state, status, extra)

    def _stream(self, request, context, state: CallState, extra: dict) -> Iterator[pb.PlanStreamResponse]:
        _, spec = read_spec(request)
        params = solver_parameters(request.solver, context)
        top_k = _top_k(request)
        events: "queue.Queue[tuple[str, Any]]" = queue.Queue()
        t0 = time.perf_counter()

        def on_solution(evaluation, objective_s: float, bound_s: float) -> None:
            events.put(("progress", (evaluation, objective_s, bound_s, time.perf_counter() - t0)))

        def run() -> None:
            try:
                events.put(("result", optimize(spec, method=params["method"], top_k=top_k,
                                               controls=_controls(params, state.cancel), on_solution=on_solution)))
            except BaseException as err:  # handed to the call's thread, which maps or re-raises it
                events.put(("error", err))

        worker = threading.Thread(target=run, name=f"solve-{state.request_id}", daemon=True)
        worker.start()
        try:
            while True:
                kind, value = events.get()
                if kind == "progress":
                    evaluation, objective_s, bound_s, elapsed_s = value
                    progress = convert.fill_message(pb.PlanProgress(), {
                        "plan": plan_entry(evaluation), "objective_value": objective_s, "best_bound": bound_s,
                        "elapsed_s": elapsed_s})
                    yield pb.PlanStreamResponse(progress=progress)
                elif kind == "error":
                    raise value
                else:
                    extra.update(_result_fields(value))
                    yield pb.PlanStreamResponse(result=convert.plan_response(plan_result_to_dict(value), params))
                    return
        finally:  # the slot is released only once the solve has stopped
            state.cancel.set()
            worker.join()


    def Sweep(self, request: pb.SweepRequest, context: grpc.ServicerContext) -> Iterator[pb.SweepResponse]:
        """A capacity sweep on one solver slot, its points streamed as they finish (server/sweep_rpc.py)."""
        from parplan.client.sweep.points import SweepError
        from parplan.server.sweep_rpc import sweep_stream

        state = self._begin(context, "Sweep")
        status, extra = None, {}
        try:
            self._acquire(state)
            try:
                yield from sweep_stream(request, state.cancel, extra)
            finally:
                self._release()
        except _Abort as abort:
            status = abort.status
        except LIBRARY_ERRORS + (SweepError,) as err:
            status = invalid_argument(err, "sweep_text")
        except GeneratorExit:  # the client went away mid-stream: the sweep was stopped by the cancel event
            self._finish(context, state, status_pb2.Status(code=code_pb2.CANCELLED, message="client cancelled"),
                         extra, abort=False)
            raise
        except Exception as err:
            status = internal_error(err)
        self._finish(context, state, status, extra)


def _controls(params: dict[str, Any], cancel: threading.Event) -> SolverControls:
    return SolverControls(time_limit_s=params["time_limit_s"], workers=params["workers"],
                          deterministic=params["deterministic"], seed=params["seed"], cancel=cancel)


def _result_fields(result) -> dict[str, Any]:
    fields = {"plan_status": result.status}
    if result.timing is not None:  # None in deterministic mode
        fields["solver_wall_time_s"] = round(result.timing.wall_time_s, 4)
    return fields


def _source_field(request: Any, err: Exception) -> str:
    if isinstance(err, PlanError) and isinstance(request, pb.EvaluateRequest) and request.HasField("plan"):
        return "plan"
    return request.WhichOneof("spec_source") or "spec_source"


_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _request_id(context: grpc.ServicerContext) -> str:
    """The caller's ``x-request-id`` if it is a sane token, else a fresh one."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and isinstance(value, str) and _REQUEST_ID.match(value):
            return value
    return uuid.uuid4().hex


def log_event(event: str, **fields: Any) -> None:
    """One JSON line on the ``parplan.server`` logger."""
    log.info(json.dumps({"ts": round(time.time(), 3), "event": event, **fields}, default=str, ensure_ascii=False))


__all__ = ["PlannerServicer", "SERVICE_NAME", "LIBRARY_ERRORS", "invalid_argument", "field_violation",
           "RequestError", "log_event", "solver_parameters"]
