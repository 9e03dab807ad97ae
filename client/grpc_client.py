"""A typed client of the planning service: the same types as the library, over gRPC.

    from parplan.client.grpc_client import PlannerClient

    with PlannerClient("planner.example:50051", token="...", root_certificates=pem) as client:
        result = client.plan(spec, deterministic=True)     # a parplan.solver.result.PlanResult
        evaluation = client.evaluate(spec)                # a parplan.costmodel.evaluation.ledger.Evaluation
        answer = client.sweep({"base": {...}, "axes": {"cluster.num_gpus": [64, 128]}})  # records, summary

``spec`` is a :class:`~parplan.costmodel.spec.spec.Spec` (sent typed) or the text of a spec file (sent as is). Errors
come back as :class:`ServiceError` (``.code``, ``.field_violations`` from the google.rpc.BadRequest).
This module imports grpcio but not OR-Tools: ``solver-cli optimize --server`` starts fast.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from parplan.library.contract import entry_fields, plan_result_from_dict
from parplan.library.spec_io import SpecError
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.spec.spec import Spec
from parplan.wire import convert
from parplan.solver.result import PlanResult
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

TOKEN_ENV = "PARPLAN_AUTH_TOKEN"  # bearer token for `solver-cli ... --server`
TLS_CA_ENV = "PARPLAN_TLS_CA_FILE"  # PEM root certificate(s): use TLS for `--server`

# gRPC's service-config retry policy (gRFC A6): a call the server refused before answering (RESOURCE_EXHAUSTED:
# its queue is full; UNAVAILABLE: draining, restarting, not yet listening) is retried with exponential backoff
# and jitter, within the call's deadline. The server sends no response headers before it admits a call, so
# such refusals stay retryable.
RETRY_POLICY = {"maxAttempts": 5, "initialBackoff": "0.2s", "maxBackoff": "5s", "backoffMultiplier": 2,
                "retryableStatusCodes": ["RESOURCE_EXHAUSTED", "UNAVAILABLE"]}
SERVICE_CONFIG = {"methodConfig": [{"name": [{"service": "parplan.v1.PlannerService"}],
                                    "retryPolicy": RETRY_POLICY}]}
CHANNEL_OPTIONS = (("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(SERVICE_CONFIG)),
                   ("grpc.max_receive_message_length", 64 * 2**20))


class ServiceError(Exception):
    """A call that ended with a non-OK status; ``field_violations`` lists (field, description) pairs."""

    def __init__(self, code: grpc.StatusCode, message: str, field_violations: list[tuple[str, str]]):
        self.code, self.message, self.field_violations = code, message, field_violations
        super().__init__(f"{code.name}: {message}")

    @classmethod
    def from_rpc_error(cls, err: grpc.RpcError) -> "ServiceError":
        violations: list[tuple[str, str]] = []
        status = rpc_status.from_call(err) if hasattr(err, "trailing_metadata") else None
        for detail in status.details if status is not None else ():
            if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
                violations += [(v.field, v.description) for v in bad.field_violations]
        return cls(err.code(), err.details() or "", violations)


@dataclass(frozen=True)
class StreamEvent:
    """One message of ``plan_stream``: an improving plan (``progress``) or the final ``result``."""

    progress: Optional[Evaluation] = None
    objective_value: Optional[float] = None
    best_bound: Optional[float] = None
    elapsed_s: Optional[float] = None
    result: Optional[PlanResult] = None


def spec_source(spec: Union[Spec, str]) -> dict[str, Any]:
    """The request's ``spec_source`` oneof for a Spec (typed) or a spec file's text."""
    if isinstance(spec, Spec):
        return {"spec": convert.spec_to_message(spec.model_dump(mode="json", exclude_none=True))}
    if isinstance(spec, str):
        return {"spec_text": spec}
    raise TypeError(f"spec: expected a Spec or the text of a spec file, got {type(spec).__name__}")


def solver_parameters(method: Optional[str] = None, time_limit_s: Optional[float] = None,
                      workers: Optional[int] = None, deterministic: Optional[bool] = None,
                      seed: Optional[int] = None) -> pb.SolverParameters:
    return convert.fill_message(pb.SolverParameters(), {"method": method, "time_limit_s": time_limit_s,
                                                        "workers": workers, "deterministic": deterministic,
                                                        "seed": seed})


class PlannerClient:
    """``PlannerClient(target)``: target ``host:port``; ``token`` for a server with auth; ``root_certificates``
    (PEM bytes) for TLS; ``timeout_s`` the default deadline of each call (it also caps the solver's time).
    The channel retries RESOURCE_EXHAUSTED and UNAVAILABLE with backoff (:data:`SERVICE_CONFIG`)."""

    def __init__(self, target: str, *, token: Optional[str] = None, root_certificates: Optional[bytes] = None,
                 timeout_s: Optional[float] = None, channel: Optional[grpc.Channel] = None):
        if channel is None:
            if root_certificates is not None:
                channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates),
                                              options=CHANNEL_OPTIONS)
            else:
                channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self.channel = channel
        self.stub = pb_grpc.PlannerServiceStub(channel)
        self.timeout_s = timeout_s
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()

    @classmethod
    def from_env(cls, target: str, **kwargs: Any) -> "PlannerClient":
        """A client taking its token and TLS roots from ``PARPLAN_AUTH_TOKEN`` / ``PARPLAN_TLS_CA_FILE``."""
        ca_file = os.environ.get(TLS_CA_ENV)
        roots = open(ca_file, "rb").read() if ca_file else None
        return cls(target, token=os.environ.get(TOKEN_ENV) or None, root_certificates=roots, **kwargs)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "PlannerClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method, request, timeout_s: Optional[float]):
        try:
            return method(request, timeout=timeout_s if timeout_s is not None else self.timeout_s,
                          metadata=self._metadata)
        except grpc.RpcError as err:
            raise ServiceError.from_rpc_error(err) from None

    def plan(self, spec: Union[Spec, str], *, top_k: int = 1, pareto: Optional[str] = None,
             timeout_s: Optional[float] = None, **solver: Any) -> PlanResult:
        """``optimize(spec)`` on the server; ``solver``: method, time_limit_s, workers, deterministic, seed."""
        request = pb.PlanRequest(**spec_source(spec), solver=solver_parameters(**solver), top_k=top_k)
        if pareto is not None:
            convert.fill_message(request, {"pareto_axis": pareto})
        return plan_result_from_dict(convert.plan_result_dict(self._call(self.stub.Plan, request, timeout_s)))

    def plan_stream(self, spec: Union[Spec, str], *, top_k: int = 1, timeout_s: Optional[float] = None,
                    **solver: Any) -> Iterator[StreamEvent]:
        """Improving plans as the solver finds them, then the final result."""
        request = pb.PlanStreamRequest(**spec_source(spec), solver=solver_parameters(**solver), top_k=top_k)
        calls = self.stub.PlanStream(request, timeout=timeout_s if timeout_s is not None else self.timeout_s,
                                     metadata=self._metadata)
        try:
            for message in calls:
                if message.WhichOneof("event") == "progress":
                    p = message.progress
                    yield StreamEvent(progress=_evaluation(p.plan),
                                      objective_value=p.objective_value, best_bound=p.best_bound, elapsed_s=p.elapsed_s)
                else:
                    yield StreamEvent(result=plan_result_from_dict(convert.plan_result_dict(message.result)))
        except grpc.RpcError as err:
            raise ServiceError.from_rpc_error(err) from None
        finally:
            calls.cancel()

    def evaluate(self, spec: Union[Spec, str], plan: Optional[dict[str, Any]] = None, *,
                 timeout_s: Optional[float] = None) -> Evaluation:
        """The cost model on the spec's ``plan:`` (or ``plan``, a PlanSpec-shaped dict)."""
        request = pb.EvaluateRequest(**spec_source(spec))
        if plan is not None:
            convert.fill_message(request, {"plan": plan})
        response = self._call(self.stub.Evaluate, request, timeout_s)
        return _evaluation(response.evaluation)

    def sweep(self, sweep: Union[dict[str, Any], str], *, jobs: int = 0, timeout_s: Optional[float] = None,
              on_point: Optional[Callable[[dict[str, Any], int, int], None]] = None) -> "SweepAnswer":
        """The ``Sweep`` RPC: a capacity sweep solved on the server. ``sweep`` is a sweep spec (a mapping whose
        ``base`` is an inline spec mapping: the server reads no files; or its YAML/JSON text); ``jobs``: solves at
        once (0: the server's choice); ``on_point(record, done, total)`` runs as each point's record arrives
        (records as ``points.jsonl`` holds them). Leaving early (an exception in ``on_point``, the deadline)
        cancels the call, which stops the server's solves."""
        text = sweep if isinstance(sweep, str) else json.dumps(sweep)
        calls = self.stub.Sweep(pb.SweepRequest(sweep_text=text, jobs=jobs),
                                timeout=timeout_s if timeout_s is not None else self.timeout_s, metadata=self._metadata)
        try:
            for message in calls:
                if message.WhichOneof("event") == "point":
                    if on_point is not None:
                        on_point(json.loads(message.point.record_json), message.point.done, message.point.total)
                else:
                    done = message.summary
                    return SweepAnswer(records=[json.loads(line) for line in done.records_jsonl.splitlines()],
                                       summary=json.loads(done.summary_json), failed=done.failed,
                                       parplan_version=done.parplan_version)
        except grpc.RpcError as err:
            raise ServiceError.from_rpc_error(err) from None
        finally:
            calls.cancel()
        raise ServiceError(grpc.StatusCode.UNKNOWN, "the Sweep stream ended without its summary", [])


@dataclass(frozen=True)
class SweepAnswer:
    """``PlannerClient.sweep``'s answer: every record in point order (with the cross-point marks: pareto, knee,
    scaling_efficiency), the summary (``summary.json``: the Pareto set, the scaling curves), how many points failed,
    and the server's parplan version."""

    records: list[dict[str, Any]]
    summary: dict[str, Any]
    failed: int
    parplan_version: str


def _evaluation(message: pb.Evaluation) -> Evaluation:
    return Evaluation.model_validate(entry_fields(convert.message_to_dict(message, omit_unset=False)))


def remote_optimize(target: str, spec: Spec, **kwargs: Any) -> PlanResult:
    """``solver-cli optimize --server``: the server's answer as a PlanResult. INVALID_ARGUMENT raises
    SpecError (the CLI's exit 2); any other failure (unreachable, refused, cancelled) a ServiceError."""
    try:
        with PlannerClient.from_env(target) as client:
            return client.plan(spec, **kwargs)
    except ServiceError as err:
        if err.code == grpc.StatusCode.INVALID_ARGUMENT:
            raise SpecError(f"--server {target}: {err.message}") from None
        raise


__all__ = ["PlannerClient", "ServiceError", "SweepAnswer", "SERVICE_CONFIG", "CHANNEL_OPTIONS", "StreamEvent", "spec_source", "solver_parameters", "remote_optimize", "TOKEN_ENV",
           "TLS_CA_ENV"]

