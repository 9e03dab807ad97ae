"""``PlannerService``: a thin adapter from parplan.v1 requests to the library and back.

Each call runs inside ONE frame, :meth:`PlannerServicer._frame`, shared by the unary and the streaming RPCs:

* the request is read and checked before it queues (server/requests.py: the spec, typed or text, with the CLI's
  loader; the solver parameters with ``solver/arguments``, the ranges ``optimize()`` applies);
* admission (:class:`~parplan.server.admission.Admission`): the call waits for one of ``max_concurrent`` solver
  slots, in a FIFO queue of at most ``max_queue`` calls, up to its deadline; RESOURCE_EXHAUSTED only past the queue
  bound, so a burst of callers is served instead of refused. The time waited and the queue length are in the answer
  (``admission``) and the solver's time limit is what is left of the deadline after the wait;
* the solve runs with :class:`SolverControls` whose ``cancel`` event the call's end sets (client cancel,
  deadline, server shutdown);
* every :class:`~parplan.costmodel.errors.ParplanError` (SpecError, PlanError, UnknownGPU, ArgumentError,
  and the RequestError of server/requests.py and the proto edge's ConversionError) becomes INVALID_ARGUMENT with a
  ``google.rpc.BadRequest`` whose field violation names the exact field (``plan.micro_batch_size``,
  ``assumptions.nope``, ``solver.workers``): :func:`~parplan.server.call_status.status_of`. Anything else is a
  bug: INTERNAL, logged;
* one JSON log line per call (server/call_log.py). The handlers that register the service on a gRPC server are
  server/handlers.py's.

A request never makes the server read a file: ``model.hf_config`` paths are refused unless the server was started with
``--hf-config-dir`` (then: relative paths under it, no link followed, regular files only, at most 1 MiB;
:func:`~parplan.server.requests.read_allowed_hf_config`); typed clients send ``ModelSpec.hf_config_json`` or
``preset``.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import grpc
from google.rpc import code_pb2, status_pb2
from grpc_status import rpc_status

from parplan.costmodel.evaluation.prediction_band import band_source
from parplan.library.contract import evaluation_to_dict, plan_entry, plan_result_to_dict
from parplan.library.evaluation import evaluate_spec
from parplan.costmodel.spec.spec import Spec
from parplan.wire import convert
from parplan.server.admission import DEFAULT_MAX_QUEUE, Abort, Admission, plain_status
from parplan.server.call_log import log_event, request_id
from parplan.server.call_registry import CallRegistry
from parplan.server.call_status import call_ended, code_name, ended_status, status_of
from parplan.server.requests import (MalformedRequest, RequestError, capped_by_deadline, expand_request_model,
                                     pareto_axis, read_allowed_hf_config, read_spec, solver_parameters, top_k)
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.solver.warm_cache import WARM
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

SHUTTING_DOWN = "server is shutting down"


@dataclass
class CallState:
    """What one call holds: its id, its cancel event (set when the call ends for any reason), its admission."""

    request_id: str
    method: str
    cancel: threading.Event
    started: float
    admission: dict[str, Any] = dataclass_field(default_factory=dict)


class PlannerServicer(pb_grpc.PlannerServiceServicer):
    """The four RPCs over ``optimize`` / ``evaluate_spec``: at most ``max_concurrent`` solving at a time and
    ``max_queue`` waiting for a slot."""

    def __init__(self, max_concurrent: int, max_queue: int = DEFAULT_MAX_QUEUE,
                 hf_config_dir: Optional[Path] = None, sweep_engine: str = "local"):
        self.max_concurrent = max_concurrent
        self.admission = Admission(max_concurrent, max_queue)
        self.hf_config_dir = Path(hf_config_dir).resolve() if hf_config_dir is not None else None
        self.sweep_engine = sweep_engine  # the Sweep RPC's engine: the server's configuration, not a request's
        self.draining = threading.Event()
        self.calls = CallRegistry()  # every call in a handler, and the time-ups the drain sets
    @property
    def active_calls(self) -> int:
        """Calls holding a solver slot (tests, the drain and the load benchmark read it)."""
        return self.admission.active

    @property
    def calls_in_handler(self) -> int:
        """Calls inside their handler from its first line (the drain and the tests read it)."""
        return self.calls.calls_in_handler

    @contextlib.contextmanager
    def handling(self, context: grpc.ServicerContext, method: str) -> Iterator[None]:
        """Count the call from its handler's first line (before its request is read) to its end; a call that
        starts while the server drains is refused UNAVAILABLE at once."""
        with self.calls.counted():
            if self.draining.is_set():
                log_event("rpc", request_id=request_id(context), method=method, peer=context.peer(),
                          code="UNAVAILABLE", error=SHUTTING_DOWN)
                context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
            yield

    # -- THE frame around every call: request id, checks, admission, cancellation, errors, one log line

    def _frame(self, request: Any, context: grpc.ServicerContext, method: str,
               body: Callable[[CallState], Iterator[Any]]) -> Iterator[Any]:
        """Run ``body`` (a generator of response messages) for one call, unary or streaming alike.

        ``body`` reads and checks the request, then holds ``with self.admitted(state, context)`` over its solve. Whatever it raises
        becomes the call's status in :func:`status_of`. Initial metadata (``x-request-id``) is sent only once
        the call is admitted, so a refusal (RESOURCE_EXHAUSTED, UNAVAILABLE) carries no response headers and
        gRPC's retry policy can retry it."""
        state = CallState(request_id(context), method, threading.Event(), time.perf_counter())
        with self.calls.timed(state.cancel, context.add_callback):
            yield from self._framed(request, context, state, body)

    def _framed(self, request: Any, context: grpc.ServicerContext, state: CallState,
                body: Callable[[CallState], Iterator[Any]]) -> Iterator[Any]:
        if not context.add_callback(state.cancel.set):
            state.cancel.set()  # the call has already ended
        status, extra = None, {}
        try:
            if self.draining.is_set():  # read while the drain began: refused before its request is checked
                raise Abort(plain_status(code_pb2.UNAVAILABLE, SHUTTING_DOWN))
            if isinstance(request, MalformedRequest):
                raise RequestError("request", f"not a serialized {request.message_type} ({request.error_type})")
            with contextlib.closing(body(state, extra)) as messages:  # closed (slot released) even mid-stream
                for message in messages:
                    yield message
        except GeneratorExit:  # the client went away mid-stream
            self._finish(context, state, plain_status(code_pb2.CANCELLED, "client cancelled"), extra, abort=False)
            raise
        except BaseException as err:  # noqa: BLE001 - ParplanError -> INVALID_ARGUMENT, the rest INTERNAL
            if call_ended(context):
                status = ended_status(context)
            else:
                status = status_of(err, request)
                if status.code == code_pb2.CANCELLED and self.draining.is_set():  # timed up by the drain (a Sweep)
                    status = plain_status(code_pb2.UNAVAILABLE, SHUTTING_DOWN)
        self._finish(context, state, status, extra)

    @contextlib.contextmanager
    def admitted(self, state: CallState, context: grpc.ServicerContext) -> Iterator[None]:
        """Hold a solver slot for the ``with`` block (see :meth:`Admission.slot`): everything after the slot is
        had, ``send_initial_metadata`` on a dead call included, runs inside the block, so the slot cannot leak."""
        remaining = context.time_remaining()
        deadline = time.monotonic() + remaining if remaining is not None else None
        # a call already queued when the drain begins keeps its place until the drain's time-up (UNAVAILABLE then):
        # a slot freed before it is served; new calls are refused before they get here
        with self.admission.slot(state.cancel, self.calls.timed_up, deadline) as (waited, ahead):
            state.admission = {"queue_wait_s": round(waited, 6), "queue_length": ahead,
                               "solver_slots": self.admission.slots, "max_queue": self.admission.max_queue}
            context.send_initial_metadata((("x-request-id", state.request_id),))
            yield

    def _finish(self, context: grpc.ServicerContext, state: CallState, status: Optional[status_pb2.Status],
                extra: dict[str, Any], abort: bool = True) -> None:
        code = "OK" if status is None else code_name(status.code)
        if status is None and state.cancel.is_set() and context.is_active() is False:  # the answer was not sent
            remaining = context.time_remaining()
            code = "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"
        log_event("rpc", request_id=state.request_id, method=state.method, peer=context.peer(), code=code,
                  latency_ms=round(1e3 * (time.perf_counter() - state.started), 2),
                  **({"queue_wait_ms": round(1e3 * state.admission["queue_wait_s"], 2)} if state.admission else {}),
                  **({"error": status.message} if status is not None and status.code != code_pb2.OK else {}), **extra)
        if status is not None and abort:
            grpc_status = rpc_status.to_status(status)
            metadata = tuple(grpc_status.trailing_metadata) + (("x-request-id", state.request_id),)
            context.abort_with_status(_WithMetadata(grpc_status.code, grpc_status.details, metadata))

    def _unary(self, request: Any, context: grpc.ServicerContext, method: str, body) -> Any:
        response = None
        for response in self._frame(request, context, method, body):
            pass
        return response

    # -- the RPCs

    def Plan(self, request: pb.PlanRequest, context: grpc.ServicerContext) -> pb.PlanResponse:
        def body(state: CallState, extra: dict):
            _, spec = read_spec(request, hf_config_dir=self.hf_config_dir)
            pareto = pareto_axis(request.pareto_axis, "pareto_axis")
            params = solver_parameters(request.solver, top_k=top_k(request), pareto=pareto)
            with self.admitted(state, context):
                params = capped_by_deadline(params, context)
                result = optimize(spec, method=params["method"], top_k=top_k(request), pareto=pareto,
                                  controls=_controls(params, state.cancel))
            extra.update(_result_fields(result))
            response = convert.plan_response(plan_result_to_dict(result), params, request.contract_json)
            yield _with_admission(response, state)

        return self._unary(request, context, "Plan", body)

    def Evaluate(self, request: pb.EvaluateRequest, context: grpc.ServicerContext) -> pb.EvaluateResponse:
        def body(state: CallState, extra: dict):
            plan = convert.plan_spec_dict_from_message(request.plan) if request.HasField("plan") else None
            _, spec = read_spec(request, plan, hf_config_dir=self.hf_config_dir)
            with self.admitted(state, context):
                data = evaluation_to_dict(evaluate_spec(spec, **WARM.evaluation_inputs(spec)),  # shared with Plan
                                          source=band_source(spec))
            extra["plan_status"] = data["status"]
            yield convert.fill_message(pb.EvaluateResponse(), {
                "status": data["status"], "evaluation": data["plans"][0], "parplan_version": data["parplan_version"],
                "band_source": data["band_source"], "contract_json": convert.contract_json(data, request.contract_json)})

        return self._unary(request, context, "Evaluate", body)

    def Pareto(self, request: pb.ParetoRequest, context: grpc.ServicerContext) -> pb.ParetoResponse:
        def body(state: CallState, extra: dict):
            _, spec = read_spec(request, hf_config_dir=self.hf_config_dir)
            axis = pareto_axis(request.axis, "axis")
            if axis is None:
                raise RequestError("axis", "set PARETO_AXIS_MEMORY or PARETO_AXIS_GPUS")
            params = solver_parameters(request.solver, pareto=axis)
            with self.admitted(state, context):
                params = capped_by_deadline(params, context)
                result = optimize(spec, method=params["method"], pareto=axis, controls=_controls(params, state.cancel))
            extra.update(_result_fields(result))
            data = plan_result_to_dict(result)
            response = convert.fill_message(pb.ParetoResponse(), {
                "status": data["status"], "axis": axis, "points": data["pareto"], "solver": data["solver"],
                "parameters": params, "timing": data.get("timing"), "parplan_version": data["parplan_version"],
                "band_source": data.get("band_source"), "contract_json": convert.contract_json(data, request.contract_json)})
            yield _with_admission(convert.set_deprecated_fields(response), state)

        return self._unary(request, context, "Pareto", body)

    def PlanStream(self, request: pb.PlanStreamRequest, context: grpc.ServicerContext) -> Iterator[pb.PlanStreamResponse]:
        def body(state: CallState, extra: dict):
            _, spec = read_spec(request, hf_config_dir=self.hf_config_dir)
            params = solver_parameters(request.solver, top_k=top_k(request))
            with self.admitted(state, context):
                yield from self._stream(spec, capped_by_deadline(params, context), top_k(request), state, extra,
                                        request.contract_json)

        yield from self._frame(request, context, "PlanStream", body)

    def _stream(self, spec: Spec, params: dict, top_k: int, state: CallState, extra: dict,
                json_asked: bool) -> Iterator[pb.PlanStreamResponse]:
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
                    response = _with_admission(convert.plan_response(plan_result_to_dict(value), params, json_asked),
                                               state)
                    yield pb.PlanStreamResponse(result=response)
                    return
        finally:  # the slot is released only once the solve has stopped
            state.cancel.set()
            worker.join()

    def Replan(self, request: pb.ReplanRequest, context: grpc.ServicerContext) -> pb.ReplanResponse:
        """Replan a running job on its changed cluster (server/replan_rpc.py, issue 43)."""
        from parplan.server.replan_rpc import replan_arguments, run_replan

        def body(state: CallState, extra: dict):
            arguments = replan_arguments(request, self.hf_config_dir)
            params = solver_parameters(request.solver)
            with self.admitted(state, context):
                data, response = run_replan(arguments, capped_by_deadline(params, context), state.cancel)
            extra["plan_status"] = data["status"]
            yield _with_admission(convert.set_deprecated_fields(response), state)

        return self._unary(request, context, "Replan", body)

    def Sweep(self, request: pb.SweepRequest, context: grpc.ServicerContext) -> Iterator[pb.SweepResponse]:
        """A capacity sweep on one solver slot, its points streamed as they finish (server/sweep_rpc.py)."""
        from parplan.server.sweep_rpc import load_request_sweep, read_request, sweep_stream

        def body(state: CallState, extra: dict):
            data, engine = read_request(request, self.sweep_engine)
            with self.admitted(state, context):  # the points are validated on the slot, under the call's deadline
                sweep = load_request_sweep(data, state.cancel, context.time_remaining)
                yield from sweep_stream(sweep, engine, request, state.cancel, extra, context.time_remaining)

        yield from self._frame(request, context, "Sweep", body)


class _WithMetadata(collections.namedtuple("_WithMetadata", ("code", "details", "trailing_metadata")), grpc.Status):
    """A grpc.Status whose trailing metadata also carries the call's x-request-id."""


def _with_admission(response: Any, state: CallState) -> Any:
    if state.admission:
        convert.fill_message(response.admission, state.admission)
    return response


def _controls(params: dict[str, Any], cancel: threading.Event) -> SolverControls:
    return SolverControls(time_limit_s=params["time_limit_s"], workers=params["workers"],
                          deterministic=params["deterministic"], seed=params["seed"], cancel=cancel)


def _result_fields(result) -> dict[str, Any]:
    fields = {"plan_status": result.status}
    if result.timing is not None:  # None in deterministic mode
        fields["solver_wall_time_s"] = round(result.timing.wall_time_s, 4)
    return fields


__all__ = ["PlannerServicer", "Admission", "status_of", "RequestError", "MalformedRequest", "log_event",
           "solver_parameters", "read_allowed_hf_config", "expand_request_model", "DEFAULT_MAX_QUEUE"]
