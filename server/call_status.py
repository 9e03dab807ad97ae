"""How a call's end becomes its gRPC status, in one place (:func:`status_of`; server/service.py's frame calls it).

Every :class:`~parplan.costmodel.errors.ParplanError` (SpecError, PlanError, UnknownGPU, ArgumentError, the
RequestError of server/requests.py and the proto edge's ConversionError) is INVALID_ARGUMENT with a
``google.rpc.BadRequest`` whose field violation names the exact field (``plan.micro_batch_size``,
``assumptions.nope``, ``solver.workers``); an admission refusal carries its own status; a call its caller ended
(cancelled, past its deadline) gets that end's status; anything else is a bug: INTERNAL, logged.
"""

from __future__ import annotations

import re
import traceback
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from parplan.costmodel.errors import ArgumentError, ParplanError
from parplan.library.spec_io import one_line
from parplan.server.admission import Abort, plain_status
from parplan.server.call_log import log_event
from parplan.v1 import planner_pb2 as pb

# The library's input errors: everything a caller can fix derives from ParplanError (costmodel/errors.py).
LIBRARY_ERRORS: tuple[type[Exception], ...] = (ParplanError,)

# library argument (solver/arguments) -> the request field that carries it
ARGUMENT_FIELDS = {"top_k": "top_k", "method": "solver.method", "time_limit_s": "solver.time_limit_s",
                   "workers": "solver.workers", "seed": "solver.seed", "deterministic": "solver.deterministic"}


def _strip_spec(path: str) -> str:
    """``spec.plan.micro_batch_size`` -> ``plan.micro_batch_size``: violations name the spec's own paths."""
    return path[len("spec."):] if path.startswith("spec.") else path


def violation_field(err: ParplanError, request: Any) -> str:
    """The field a caller fixes: the spec path (as in spec.yaml), a request field (``solver.workers``,
    ``top_k``) or, when the error names none, the request field the spec came from."""
    if isinstance(err, ArgumentError):
        if err.argument == "pareto":
            return "axis" if isinstance(request, pb.ParetoRequest) else "pareto_axis"
        return ARGUMENT_FIELDS.get(err.argument, err.argument)
    field = getattr(err, "field_path", None) or err.field
    if isinstance(request, pb.SweepRequest):  # "axes.cluster.num_gpus: value 12: ..." names its key first
        named = str(err).split(":", 1)[0].strip()
        return named if re.fullmatch(r"[A-Za-z_][\w.\[\]-]*", named) else "sweep_text"
    if field and field not in ("spec", "spec_text"):
        return _strip_spec(field)
    source = request.WhichOneof("spec_source") if hasattr(request, "WhichOneof") else None
    return source or field or "spec_source"


def invalid_argument(err: ParplanError, request: Any) -> status_pb2.Status:
    """THE mapping of bad input to a gRPC status: INVALID_ARGUMENT with a google.rpc.BadRequest."""
    violation = error_details_pb2.BadRequest.FieldViolation(field=violation_field(err, request),
                                                            description=one_line(str(err)))
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    return status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=violation.description, details=[detail])


def internal_error(err: BaseException) -> status_pb2.Status:
    log_event("internal_error", error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc())
    return status_pb2.Status(code=code_pb2.INTERNAL, message=f"internal error ({type(err).__name__}): "
                                                            f"{one_line(str(err))}")


def status_of(err: BaseException, request: Any) -> status_pb2.Status:
    """The one place an exception of a call becomes its status."""
    if isinstance(err, Abort):
        return err.status
    if isinstance(err, ParplanError):
        return invalid_argument(err, request)
    return internal_error(err)


def call_ended(context: grpc.ServicerContext) -> bool:
    """Whether the call was already over (cancelled, past its deadline) when its body raised: then the raise
    (``send_initial_metadata`` on a dead call, say) is the caller's doing, not the server's."""
    return context.is_active() is False


def ended_status(context: grpc.ServicerContext) -> status_pb2.Status:
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        return plain_status(code_pb2.DEADLINE_EXCEEDED, "the call's deadline passed")
    return plain_status(code_pb2.CANCELLED, "client cancelled")


def code_name(code: int) -> str:
    return code_pb2.Code.Name(code)
