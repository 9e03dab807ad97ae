"""The PlannerService's registration on a gRPC server: the generated handlers' shape with two changes, a request
that is not its message becomes INVALID_ARGUMENT in the call's frame (:func:`_tolerant_deserializer`), and each
unary-request method is served as request-streaming so the servicer holds the call before its body arrives
(:func:`_single_request`)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import grpc
from google.rpc import code_pb2

from parplan.server.call_status import ended_status
from parplan.server.requests import MalformedRequest
from parplan.server.service import PlannerServicer
from parplan.v1 import planner_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["PlannerService"].full_name  # "parplan.v1.PlannerService"


def _tolerant_deserializer(message_class: Any) -> Callable[[bytes], Any]:
    """Parse a request; bytes that are not the message become a :class:`MalformedRequest` (INVALID_ARGUMENT
    in the frame) instead of gRPC's own INTERNAL "Exception deserializing request"."""
    name = message_class.DESCRIPTOR.full_name

    def parse(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except Exception as err:  # noqa: BLE001 - DecodeError, RecursionError, ...
            error_type = type(err).__name__
        # the error's name only, outside the except block: an exception kept (or returned from inside its block) holds
        # its traceback, whose frames hold the call's context until the cycle collector runs, and gRPC refuses new
        # streams past its concurrent-stream limit until then (tests/server/test_handlers.py)
        return MalformedRequest(name, error_type)

    return parse




def _single_request(behavior: Callable[[Any, grpc.ServicerContext], Any], streaming: bool,
                    servicer: PlannerServicer, method: str):
    """A unary-request method served as a request-streaming handler: it reads the one request message itself,
    so the call is in the servicer's hands before its body arrives and the server's idle timeout (app.py's
    ``IdleStreamTimeout``, a ``context.cancel()`` after the receive timeout) frees a call that never sends
    it. gRPC's own unary handlers block a worker thread on the body with no time limit. The call is counted
    for the drain (:meth:`PlannerServicer.handling`) from before its request is read."""
    def first(request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        try:
            request = next(request_iterator, None)
        except Exception:  # noqa: BLE001 - cancelled or past its deadline while the request was read
            if context.is_active():
                raise
            request = None
        if request is None:
            if context.is_active():
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no request message (exactly one is required)")
            ended = ended_status(context)  # the caller's doing: no internal_error, no None to serialize
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED if ended.code == code_pb2.DEADLINE_EXCEEDED else
                          grpc.StatusCode.CANCELLED, ended.message)
        return request

    if streaming:
        def stream(request_iterator, context):
            with servicer.handling(context, method):
                request = first(request_iterator, context)
                if request is not None:
                    yield from behavior(request, context)
        return stream

    def unary(request_iterator, context):
        with servicer.handling(context, method):
            request = first(request_iterator, context)
            return None if request is None else behavior(request, context)
    return unary


def method_handlers(servicer: PlannerServicer) -> dict[str, grpc.RpcMethodHandler]:
    """The PlannerService's handlers, as the generated ``add_PlannerServiceServicer_to_server`` builds them but
    with :func:`_tolerant_deserializer` and request-streaming on the server's side (:func:`_single_request`;
    the wire format is the same, clients still call unary methods)."""
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["PlannerService"].methods:
        request_class = getattr(pb, method.input_type.name)
        response_class = getattr(pb, method.output_type.name)
        make = grpc.stream_stream_rpc_method_handler if method.server_streaming else grpc.stream_unary_rpc_method_handler
        behavior = _single_request(getattr(servicer, method.name), method.server_streaming, servicer, method.name)
        handlers[method.name] = make(behavior,
                                     request_deserializer=_tolerant_deserializer(request_class),
                                     response_serializer=response_class.SerializeToString)
    return handlers


def add_to_server(servicer: PlannerServicer, server: grpc.Server) -> None:
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, method_handlers(servicer)),))
