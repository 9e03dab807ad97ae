"""The gRPC server around :class:`PlannerServicer`: health, reflection, auth, TLS, limits, drain on SIGTERM.

``solver-cli serve`` calls :func:`serve`; tests and the load benchmark call :func:`start` for an in-process
server on an ephemeral port. Behaviour:

* ``grpc.health.v1.Health``: SERVING for ``""`` and ``parplan.v1.PlannerService``; NOT_SERVING once draining.
  Health needs no token (the kubelet's ``grpc:`` probe sends none) and never waits for a solver slot.
* server reflection (``grpcurl HOST:PORT list``) for the planner and health services.
* ``--auth-token-file``: every other call needs ``authorization: Bearer <token>``, else UNAUTHENTICATED.
* ``--tls-cert``/``--tls-key``: TLS (PEM files); otherwise plaintext (for a local or mesh-terminated port).
* ``--max-concurrent N`` solving calls at once; ``--max-queue Q`` more wait for a slot (FIFO, up to their
  deadline); beyond that RESOURCE_EXHAUSTED at once (the Python client retries it with backoff).
* no starvation: health and reflection never wait for a solver slot; the thread pool and gRPC's
  ``maximum_concurrent_rpcs`` are N + Q + :data:`SERVICE_THREADS`, so stalled calls leave room for others;
  every request stream (the planner's single request included: the methods are served request-streaming)
  that sends nothing for ``--idle-timeout`` seconds is cancelled (:class:`IdleStreamTimeout`); HTTP/2
  keepalive drops dead peers, idle connections close after :data:`MAX_CONNECTION_IDLE_MS`, and one
  connection carries at most :data:`MAX_STREAMS_PER_CONNECTION` streams.
* reflection v1 and v1alpha; ``--hf-config-dir``: the only folder a request's ``model.hf_config`` may name.
* warnings (a JSON ``warning`` line) when a token travels over plaintext or the server listens beyond
  loopback without TLS.
* requests over :data:`MAX_REQUEST_BYTES` are refused by gRPC with RESOURCE_EXHAUSTED.
* SIGTERM/SIGINT: health goes NOT_SERVING, new calls get UNAVAILABLE, in-flight calls have ``grace_s`` to
  finish; then they are cancelled (their solves stop) and the process exits 0.
* one JSON log line per call on stderr: request id (the caller's ``x-request-id`` or a fresh one), method,
  peer, status code, latency.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import signal
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

from parplan.client.spec_io import MAX_SPEC_BYTES
from parplan.server.service import DEFAULT_MAX_QUEUE, SERVICE_NAME, PlannerServicer, add_to_server, log_event

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50051
DEFAULT_MAX_CONCURRENT = 4
DEFAULT_GRACE_S = 10.0
MAX_REQUEST_BYTES = MAX_SPEC_BYTES + 64 * 1024  # the largest spec text plus the rest of a request
SERVICE_THREADS = 32  # threads beyond the slots and the queue: health, reflection, refusals, stalled calls
DEFAULT_IDLE_TIMEOUT_S = 10.0  # a request stream that sends nothing this long is cancelled
MAX_STREAMS_PER_CONNECTION = 32  # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS
MAX_CONNECTION_IDLE_MS = 5 * 60 * 1000  # a connection with no call for this long is closed
KEEPALIVE_TIME_MS = 60 * 1000  # ping an idle connection ...
KEEPALIVE_TIMEOUT_MS = 20 * 1000  # ... and drop it when the ping is not answered
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"
HEALTH_SERVICE_NAME = health.SERVICE_NAME  # "grpc.health.v1.Health"
UNAUTHENTICATED_METHODS_PREFIX = f"/{HEALTH_SERVICE_NAME}/"


class ServeConfigError(ValueError):
    """A server option that cannot work (unreadable certificate, empty token file, port in use)."""


@dataclass(frozen=True)
class ServeOptions:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT  # 0: an ephemeral port (tests)
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    tls_cert: Optional[Path] = None
    tls_key: Optional[Path] = None
    auth_token_file: Optional[Path] = None
    grace_s: float = DEFAULT_GRACE_S
    max_queue: int = DEFAULT_MAX_QUEUE
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    hf_config_dir: Optional[Path] = None


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ServeConfigError(f"{what}: cannot read {path}: {err.strerror or err}") from None


def read_token(path: Path) -> str:
    token = _read(path, "--auth-token-file").decode("utf-8", errors="replace").strip()
    if not token or any(ch.isspace() for ch in token):
        raise ServeConfigError(f"--auth-token-file: {path} must hold one token (no spaces), got "
                               f"{'nothing' if not token else 'whitespace inside'}")
    return token


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


def _reflection_v1_handler(servicer: "reflection.ReflectionServicer") -> grpc.GenericRpcHandler:
    """``grpc.reflection.v1.ServerReflection`` (grpcio-reflection 1.81 serves only v1alpha): v1 is v1alpha
    under another package name, field for field, so its descriptors are v1alpha's renamed, added to the
    default pool, and the same servicer answers both."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName("grpc/reflection/v1/reflection.proto")
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto()
        reflection_pb2.DESCRIPTOR.CopyToProto(proto)
        proto.name, proto.package = "grpc/reflection/v1/reflection.proto", "grpc.reflection.v1"
        proto.ClearField("options")
        rename = lambda name: name.replace(".grpc.reflection.v1alpha.", ".grpc.reflection.v1.")  # noqa: E731
        for message in proto.message_type:
            for field in message.field:
                if field.type_name:
                    field.type_name = rename(field.type_name)
        for service in proto.service:
            for method in service.method:
                method.input_type, method.output_type = rename(method.input_type), rename(method.output_type)
        pool.Add(proto)
    request = message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionRequest"))
    response = message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionResponse"))
    v1alpha_request = reflection_pb2.ServerReflectionRequest

    def info(request_iterator, context):
        alpha = (v1alpha_request.FromString(r.SerializeToString()) for r in request_iterator)
        for answer in servicer.ServerReflectionInfo(alpha, context):
            yield response.FromString(answer.SerializeToString())

    handler = grpc.stream_stream_rpc_method_handler(info, request.FromString, response.SerializeToString)
    return grpc.method_handlers_generic_handler(REFLECTION_V1_SERVICE, {"ServerReflectionInfo": handler})


def _is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def security_warnings(options: "ServeOptions") -> list[str]:
    """What a deployment should know: tokens over plaintext, a non-loopback address without TLS."""
    warnings = []
    if options.tls_cert is None and options.auth_token_file is not None:
        warnings.append("--auth-token-file without --tls-cert/--tls-key: bearer tokens travel in plaintext; "
                        "terminate TLS here or in a mesh in front of the server")
    if options.tls_cert is None and not _is_loopback(options.host):
        warnings.append(f"listening on {options.host} without TLS: anyone on the network can read the specs and "
                        "plans (and tokens); use --tls-cert/--tls-key or a TLS-terminating mesh")
    return warnings


@dataclass
class RunningServer:
    """A started server: its port, the servicer (active call count) and the health servicer."""

    server: grpc.Server
    port: int
    servicer: PlannerServicer
    health: health.HealthServicer

    def drain(self, grace_s: float) -> None:
        """NOT_SERVING, refuse new calls, give in-flight calls ``grace_s``, then cancel the rest and stop.

        The server keeps answering health checks (NOT_SERVING) while in-flight calls finish; gRPC's own
        ``stop`` would refuse them too, so it is called only once the calls are done or the grace is over."""
        deadline = time.monotonic() + grace_s
        log_event("draining", grace_s=grace_s, active_calls=self.servicer.active_calls)
        self.servicer.draining.set()
        self.health.enter_graceful_shutdown()
        while self.servicer.active_calls and time.monotonic() < deadline:
            time.sleep(0.05)
        left = self.servicer.active_calls
        self.server.stop(max(0.0, deadline - time.monotonic())).wait()
        log_event("stopped", cancelled_calls=left)


def start(options: ServeOptions) -> RunningServer:
    """Build, bind and start the server (not blocking)."""
    if options.max_concurrent < 1:
        raise ServeConfigError(f"--max-concurrent: must be at least 1, got {options.max_concurrent}")
    if options.max_queue < 0:
        raise ServeConfigError(f"--max-queue: must be at least 0, got {options.max_queue}")
    if not options.idle_timeout_s > 0:
        raise ServeConfigError(f"--idle-timeout: must be more than 0 seconds, got {options.idle_timeout_s}")
    if options.hf_config_dir is not None and not Path(options.hf_config_dir).is_dir():
        raise ServeConfigError(f"--hf-config-dir: {options.hf_config_dir} is not a folder")
    if (options.tls_cert is None) != (options.tls_key is None):
        raise ServeConfigError("--tls-cert and --tls-key go together (PEM certificate chain and private key)")
    interceptors: list[grpc.ServerInterceptor] = [IdleStreamTimeout(options.idle_timeout_s)]
    if options.auth_token_file is not None:
        interceptors.append(BearerTokenInterceptor(read_token(options.auth_token_file)))
    threads = options.max_concurrent + options.max_queue + SERVICE_THREADS
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rpc"),
        interceptors=interceptors,
        maximum_concurrent_rpcs=threads,
        options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                 ("grpc.max_send_message_length", 64 * 2**20),
                 ("grpc.so_reuseport", 0),
                 ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
                 ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
                 ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
                 ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
                 ("grpc.http2.min_ping_interval_without_data_ms", 10_000)],
    )
    servicer = PlannerServicer(options.max_concurrent, options.max_queue, options.hf_config_dir)
    add_to_server(servicer, server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (SERVICE_NAME, HEALTH_SERVICE_NAME, REFLECTION_V1_SERVICE, reflection.SERVICE_NAME)
    reflection_servicer = reflection.ReflectionServicer(names)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(reflection_servicer, server)
    server.add_generic_rpc_handlers((_reflection_v1_handler(reflection_servicer),))
    address = f"{options.host}:{options.port}"
    try:
        if options.tls_cert is not None:
            credentials = grpc.ssl_server_credentials(
                [(_read(options.tls_key, "--tls-key"), _read(options.tls_cert, "--tls-cert"))])
            port = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError as err:
        raise ServeConfigError(f"cannot listen on {address}: {err}") from None
    if port == 0:
        raise ServeConfigError(f"cannot listen on {address} (in use, or not a local address)")
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log_event("serving", address=f"{options.host}:{port}", tls=options.tls_cert is not None,
              auth=options.auth_token_file is not None, max_concurrent=options.max_concurrent,
              max_queue=options.max_queue, idle_timeout_s=options.idle_timeout_s,
              hf_config_dir=str(options.hf_config_dir) if options.hf_config_dir is not None else None)
    for warning in security_warnings(options):
        log_event("warning", message=warning)
    return RunningServer(server, port, servicer, health_servicer)


def configure_logging() -> None:
    """JSON lines (one per record, already formatted by :func:`log_event`) on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("parplan.server")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def serve(options: ServeOptions) -> None:
    """Run until SIGTERM or SIGINT, then drain within ``options.grace_s`` (``solver-cli serve``)."""
    configure_logging()
    running = start(options)
    stop = threading.Event()

    def on_signal(signum, frame):
        log_event("signal", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(0.5):
        pass
    running.drain(options.grace_s)


__all__ = ["ServeOptions", "security_warnings", "IdleStreamTimeout", "ServeConfigError", "RunningServer", "start", "serve", "configure_logging",
           "DEFAULT_PORT", "DEFAULT_HOST", "HEALTH_SERVICE_NAME", "MAX_REQUEST_BYTES"]
