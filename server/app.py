"""The gRPC server around :class:`PlannerServicer`: health, reflection, auth, TLS, limits, drain on SIGTERM.

``solver-cli serve`` calls :func:`serve`; tests and the load benchmark call :func:`start` for an in-process
server on an ephemeral port. Behaviour:

* ``grpc.health.v1.Health``: SERVING for ``""`` and ``parplan.v1.PlannerService``; NOT_SERVING once draining.
  Health needs no token (the kubelet's ``grpc:`` probe sends none) and never waits for a solver slot.
* server reflection (``grpcurl HOST:PORT list``) for the planner and health services.
* ``--auth-token-file``: every other call needs ``authorization: Bearer <token>``, else UNAUTHENTICATED.
* ``--tls-cert``/``--tls-key``: TLS (PEM files); otherwise plaintext (for a local or mesh-terminated port).
* ``--max-concurrent N``: at most N solving calls; more get RESOURCE_EXHAUSTED at once (no queue).
  The thread pool is N plus a few threads for health and reflection, and gRPC's own ``maximum_concurrent_rpcs``
  backstop bounds everything else, so no request waits in an unbounded queue.
* requests over :data:`MAX_REQUEST_BYTES` are refused by gRPC with RESOURCE_EXHAUSTED.
* SIGTERM/SIGINT: health goes NOT_SERVING, new calls get UNAVAILABLE, in-flight calls have ``grace_s`` to
  finish; then they are cancelled (their solves stop) and the process exits 0.
* one JSON log line per call on stderr: request id (the caller's ``x-request-id`` or a fresh one), method,
  peer, status code, latency.
"""

from __future__ import annotations

import hmac
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
from grpc_reflection.v1alpha import reflection

from parplan.client.spec_io import MAX_SPEC_BYTES
from parplan.server.service import SERVICE_NAME, PlannerServicer, log_event
from parplan.v1 import planner_pb2_grpc as pb_grpc

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50051
DEFAULT_MAX_CONCURRENT = 4
DEFAULT_GRACE_S = 10.0
MAX_REQUEST_BYTES = MAX_SPEC_BYTES + 64 * 1024  # the largest spec text plus the rest of a request
SERVICE_THREADS = 4  # threads beyond the solver slots: health checks, reflection, refusals
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
    if (options.tls_cert is None) != (options.tls_key is None):
        raise ServeConfigError("--tls-cert and --tls-key go together (PEM certificate chain and private key)")
    interceptors = []
    if options.auth_token_file is not None:
        interceptors.append(BearerTokenInterceptor(read_token(options.auth_token_file)))
    threads = options.max_concurrent + SERVICE_THREADS
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rpc"),
        interceptors=interceptors,
        maximum_concurrent_rpcs=threads,
        options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                 ("grpc.max_send_message_length", 64 * 2**20),
                 ("grpc.so_reuseport", 0)],
    )
    servicer = PlannerServicer(options.max_concurrent)
    pb_grpc.add_PlannerServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((SERVICE_NAME, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME), server)
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
              auth=options.auth_token_file is not None, max_concurrent=options.max_concurrent)
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


__all__ = ["ServeOptions", "ServeConfigError", "RunningServer", "start", "serve", "configure_logging",
           "DEFAULT_PORT", "DEFAULT_HOST", "HEALTH_SERVICE_NAME", "MAX_REQUEST_BYTES"]
