"""The gRPC server's interceptors (server/app.py installs them): bearer-token authentication (health exempt, the
kubelet's probe sends no token), the idle timeout of request streams, and requests parsed inside the call so that
bytes which are not the message are INVALID_ARGUMENT, not gRPC's INTERNAL."""

from __future__ import annotations

import hmac
import threading

import grpc
from grpc_health.v1 import health

from parplan.server.call_log import log_event

UNAUTHENTICATED_METHODS_PREFIX = f"/{health.SERVICE_NAME}/"  # health needs no token


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """UNAUTHENTICATED unless the call carries ``authorization: Bearer <token>`` (health is exempt)."""

    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith(UNAUTHENTICATED_METHODS_PREFIX):
            return continuation(handler_call_details)
        given = dict(handler_call_details.invocation_metadata or ()).get("authorization", "")
        if isinstance(given, str) and hmac.compare_digest(given.encode(), self._expected):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        return _refusing_handler(handler, grpc.StatusCode.UNAUTHENTICATED,
                                 "missing or invalid bearer token (metadata 'authorization: Bearer <token>')")


def _refusing_handler(handler, code: grpc.StatusCode, message: str):
    def refuse(request, context):
        log_event("rpc", method="(refused)", peer=context.peer(), code=code.name, error=message)
        context.abort(code, message)

    if handler is None:
        return None
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)
    if handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)
    return grpc.unary_unary_rpc_method_handler(refuse, handler.request_deserializer, handler.response_serializer)


class _IdleTimer:
    """The request iterator of one call, cancelling the call when no message arrives within ``timeout_s``."""

    def __init__(self, iterator, context, timeout_s: float, method: str):
        self._iterator, self._context, self._timeout_s, self._method = iterator, context, timeout_s, method

    def __iter__(self):
        return self

    def _expire(self) -> None:
        log_event("idle_timeout", method=self._method, peer=self._context.peer(), timeout_s=self._timeout_s)
        self._context.cancel()

    def __next__(self):
        timer = threading.Timer(self._timeout_s, self._expire)
        timer.daemon = True
        timer.start()
        try:
            return next(self._iterator)
        finally:
            timer.cancel()


class IdleStreamTimeout(grpc.ServerInterceptor):
    """Every request-streaming handler (the planner's methods, reflection) reads through an :class:`_IdleTimer`:
    a call that sends nothing for ``timeout_s`` seconds is cancelled and frees its worker thread."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or not handler.request_streaming:
            return handler
        method, timeout_s = handler_call_details.method, self.timeout_s
        inner = handler.stream_unary or handler.stream_stream

        def behavior(request_iterator, context):
            return inner(_IdleTimer(request_iterator, context, timeout_s, method), context)

        make = grpc.stream_unary_rpc_method_handler if handler.stream_unary else grpc.stream_stream_rpc_method_handler
        return make(behavior, handler.request_deserializer, handler.response_serializer)


class _ParsedRequests:
    """A raw request stream parsed message by message; bytes that do not parse end the call INVALID_ARGUMENT."""

    def __init__(self, raw, deserialize, context):
        self._raw, self._deserialize, self._context = raw, deserialize, context

    def __iter__(self):
        return self

    def __next__(self):
        data = next(self._raw)
        try:
            return self._deserialize(data)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends: the caller's bytes
            self._context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"request: {len(data)} bytes that are not a valid request message")


class StrictRequests(grpc.ServerInterceptor):
    """Every handler reads its request(s) as a stream of raw bytes parsed inside the call: a unary request
    becomes a request stream (so :class:`IdleStreamTimeout` cancels a call that never sends it, instead of a
    worker thread waiting for it), and bytes that do not parse are INVALID_ARGUMENT (gRPC's own deserializer
    failure is INTERNAL). The wire format of unary and request-streaming calls is the same, so callers see
    no difference."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        deserialize = handler.request_deserializer
        if handler.request_streaming:
            inner = handler.stream_unary or handler.stream_stream

            def streaming(request_iterator, context):
                return inner(_ParsedRequests(request_iterator, deserialize, context), context)

            make = (grpc.stream_unary_rpc_method_handler if handler.stream_unary
                    else grpc.stream_stream_rpc_method_handler)
            return make(streaming, None, handler.response_serializer)
        inner = handler.unary_unary or handler.unary_stream

        def unary(request_iterator, context):
            request = next(_ParsedRequests(request_iterator, deserialize, context), None)
            if request is None:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request: no message sent")
            return inner(request, context)

        make = grpc.stream_unary_rpc_method_handler if handler.unary_unary else grpc.stream_stream_rpc_method_handler
        return make(unary, None, handler.response_serializer)
