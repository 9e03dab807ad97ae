"""The gRPC server around :class:`PlannerServicer`: health, reflection, auth, TLS, limits, drain on SIGTERM.

``solver-cli serve`` calls :func:`serve`; tests and the load benchmark call :func:`start` for an in-process
server on an ephemeral port. Behaviour:

* ``grpc.health.v1.Health``: SERVING for ``""`` and ``parplan.v1.PlannerService``; NOT_SERVING once draining.
  Health needs no token (the kubelet's ``grpc:`` probe sends none) and never waits for a solver slot.
* a health-only server on ``--health-port`` (default 50052; same host, plaintext, no token) with its own
  thread pool and concurrency cap, for the kubelet's probes; health stays on the main port too (same state),
  where it shares gRPC's ``maximum_concurrent_rpcs`` with the planner: beyond :data:`SERVICE_THREADS` stalled
  streams on the main port a health check there gets RESOURCE_EXHAUSTED until their idle timeout (probe the
  health port).
* server reflection (``grpcurl HOST:PORT list``) for the planner and health services.
* ``--auth-token-file``: every other call needs ``authorization: Bearer <token>``, else UNAUTHENTICATED.
* ``--tls-cert``/``--tls-key``: TLS (PEM files); otherwise plaintext (for a local or mesh-terminated port).
* ``--max-concurrent N`` solving calls at once; ``--max-queue Q`` more wait for a slot (FIFO, up to their
  deadline); beyond that RESOURCE_EXHAUSTED at once (the Python client retries it with backoff).
* no solver-slot waits for health and reflection; the thread pool and gRPC's
  ``maximum_concurrent_rpcs`` are N + Q + :data:`SERVICE_THREADS` (1,024), so stalled calls leave room for
  others (600 stalled streams, 200 on each service, leave health and a Plan served: tests/server/test_service_health.py);
  every request stream (the planner's single request included: the methods are served request-streaming)
  that sends nothing for ``--idle-timeout`` seconds is cancelled (:class:`IdleStreamTimeout`); HTTP/2
  keepalive drops dead peers, idle connections close after :data:`MAX_CONNECTION_IDLE_MS`, and one
  connection carries at most :data:`MAX_STREAMS_PER_CONNECTION` streams.
* reflection v1 and v1alpha; ``--hf-config-dir``: the only folder a request's ``model.hf_config`` may name;
  ``--sweep-engine``: the Sweep RPC's engine (a request may not name another, nor any ``ray_address``).
* warnings (a JSON ``warning`` line) when a token travels over plaintext or the server listens beyond
  loopback without TLS.
* requests over :data:`MAX_REQUEST_BYTES` are refused by gRPC with RESOURCE_EXHAUSTED.
* SIGTERM/SIGINT (:meth:`RunningServer.drain`): health goes NOT_SERVING, new calls get UNAVAILABLE; in-flight
  calls (queued ones keep their place) have ``grace_s`` to finish: those still running
  :data:`DRAIN_ANSWER_MARGIN_S` before its end are timed up (each solve answers with its best plan so far,
  FEASIBLE/UNKNOWN, as at its own time limit; a Sweep ends UNAVAILABLE after the points it sent; a call still
  queued gets UNAVAILABLE); at the grace the rest (calls still reading their request) are cancelled, and the
  process exits 0 by the grace + :data:`EXIT_SLACK_S` even if a handler does not stop.
* one JSON log line per call on stderr: request id (the caller's ``x-request-id`` or a fresh one), method,
  peer, status code, latency.
"""

from __future__ import annotations

import ipaddress
import logging
import os
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

from parplan.library.spec_io import MAX_SPEC_BYTES
from parplan.library.sweep.engines import ENGINES
from parplan.server.call_log import log_event
from parplan.server.handlers import SERVICE_NAME, add_to_server
from parplan.server.interceptors import BearerTokenInterceptor, IdleStreamTimeout, StrictRequests
from parplan.server.service import DEFAULT_MAX_QUEUE, PlannerServicer

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50051
DEFAULT_HEALTH_PORT = 50052
HEALTH_THREADS = 256  # the health-only server's own pool and concurrency cap (stalled probes are cancelled
HEALTH_IDLE_TIMEOUT_S = 1.0  # after this long without their request)
DEFAULT_MAX_CONCURRENT = 4
DEFAULT_GRACE_S = 10.0
DRAIN_ANSWER_MARGIN_S = 1.0  # the drain times up in-flight solves this long before the grace ends (at most half
# the grace), so each sends its best plan so far before the server stops
EXIT_SLACK_S = 0.5  # past the grace, how long the drain waits for handlers to return before the process exits anyway
MAX_REQUEST_BYTES = MAX_SPEC_BYTES + 64 * 1024  # the largest spec text plus the rest of a request
# threads beyond the slots and the queue: health, reflection, refusals, and calls whose request has not come (a
# stalled stream holds its thread until its idle timeout); the pool starts threads as calls need them
SERVICE_THREADS = 1024
DEFAULT_IDLE_TIMEOUT_S = 10.0  # a request stream that sends nothing this long is cancelled
MAX_STREAMS_PER_CONNECTION = 32  # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS
MAX_CONNECTION_IDLE_MS = 5 * 60 * 1000  # a connection with no call for this long is closed
KEEPALIVE_TIME_MS = 60 * 1000  # ping an idle connection ...
KEEPALIVE_TIMEOUT_MS = 20 * 1000  # ... and drop it when the ping is not answered
# both servers' connections: one port per process, streams per connection, idle and keepalive limits
CONNECTION_OPTIONS = (("grpc.so_reuseport", 0),
                      ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
                      ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
                      ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
                      ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
                      ("grpc.http2.min_ping_interval_without_data_ms", 10_000))
REFLECTION_V1_SERVICE = "grpc.reflection.v1.ServerReflection"
HEALTH_SERVICE_NAME = health.SERVICE_NAME  # "grpc.health.v1.Health"


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
    health_port: int = DEFAULT_HEALTH_PORT  # the health-only server's port (plaintext, no token); 0: ephemeral
    sweep_engine: str = "local"  # the Sweep RPC's engine ("local" or "ray": a Ray runtime on the server)


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
    health_server: Optional[grpc.Server] = None  # the health-only server (stopped with the main one)
    health_port: int = 0

    def drain(self, grace_s: float) -> int:
        """Stop within ``grace_s``: NOT_SERVING, new calls UNAVAILABLE; calls (queued ones included) that end
        within the grace less :data:`DRAIN_ANSWER_MARGIN_S` end as usual, the rest are timed up then
        (:meth:`CallRegistry.time_up`: each solve answers with its best plan so far, calls still queued get
        UNAVAILABLE); at the grace, whatever is left (calls still reading their request included) is cancelled
        and the server stops. Returns the
        calls whose handlers had still not returned :data:`EXIT_SLACK_S` after the grace (:func:`serve` exits
        regardless).

        Every call counts from its handler's first line (server/call_registry.py). The server
        keeps answering health checks (NOT_SERVING) meanwhile; gRPC's own ``stop`` would refuse them too, so
        it is called only once no call is past its request or the grace is over."""
        t0 = time.monotonic()
        end = t0 + grace_s
        servicer = self.servicer
        calls = servicer.calls
        log_event("draining", grace_s=grace_s, calls=calls.calls_in_handler, active_calls=servicer.active_calls,
                  queued_calls=servicer.admission.queued)
        servicer.draining.set()  # new calls get UNAVAILABLE
        self.health.enter_graceful_shutdown()
        if not calls.wait(end - min(DRAIN_ANSWER_MARGIN_S, grace_s / 2)):
            log_event("time_up", calls=calls.time_up(), grace_left_s=round(end - time.monotonic(), 3))
            calls.wait(end)
        cut, reading = calls.calls_past_request, calls.calls_in_handler - calls.calls_past_request
        finish = max(end, time.monotonic()) + EXIT_SLACK_S
        self.server.stop(0).wait(EXIT_SLACK_S)  # the rest (calls still reading their request) UNAVAILABLE
        if self.health_server is not None:
            self.health_server.stop(0).wait(max(0.0, finish - time.monotonic()))
        calls.wait(finish, reading_too=True)
        left = calls.calls_in_handler
        log_event("stopped", cancelled_calls=cut, reading_calls=reading, unfinished_handlers=left,
                  drain_s=round(time.monotonic() - t0, 3))
        return left


def start(options: ServeOptions) -> RunningServer:
    """Build, bind and start the server (not blocking)."""
    if options.max_concurrent < 1:
        raise ServeConfigError(f"--max-concurrent: must be at least 1, got {options.max_concurrent}")
    if options.max_queue < 0:
        raise ServeConfigError(f"--max-queue: must be at least 0, got {options.max_queue}")
    if not options.idle_timeout_s > 0:
        raise ServeConfigError(f"--idle-timeout: must be more than 0 seconds, got {options.idle_timeout_s}")
    if options.sweep_engine not in ENGINES:
        raise ServeConfigError(f"--sweep-engine: must be one of {', '.join(ENGINES)}, got {options.sweep_engine!r}")
    if options.hf_config_dir is not None and not Path(options.hf_config_dir).is_dir():
        raise ServeConfigError(f"--hf-config-dir: {options.hf_config_dir} is not a folder")
    if (options.tls_cert is None) != (options.tls_key is None):
        raise ServeConfigError("--tls-cert and --tls-key go together (PEM certificate chain and private key)")
    if not 0 <= options.health_port <= 65535:
        raise ServeConfigError(f"--health-port: must be 0 to 65535, got {options.health_port}")
    interceptors: list[grpc.ServerInterceptor] = [IdleStreamTimeout(options.idle_timeout_s)]
    if options.auth_token_file is not None:
        interceptors.append(BearerTokenInterceptor(read_token(options.auth_token_file)))
    interceptors.append(StrictRequests())
    threads = options.max_concurrent + options.max_queue + SERVICE_THREADS
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rpc"),
        interceptors=interceptors,
        maximum_concurrent_rpcs=threads,
        options=[("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                 ("grpc.max_send_message_length", 64 * 2**20), *CONNECTION_OPTIONS],
    )
    servicer = PlannerServicer(options.max_concurrent, options.max_queue, options.hf_config_dir,
                               options.sweep_engine)
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
    health_server, health_port = _start_health_server(options, health_servicer)
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log_event("serving", address=f"{options.host}:{port}", tls=options.tls_cert is not None,
              auth=options.auth_token_file is not None, max_concurrent=options.max_concurrent,
              max_queue=options.max_queue, idle_timeout_s=options.idle_timeout_s,
              hf_config_dir=str(options.hf_config_dir) if options.hf_config_dir is not None else None)
    for warning in security_warnings(options):
        log_event("warning", message=warning)
    return RunningServer(server, port, servicer, health_servicer, health_server, health_port)


def _start_health_server(options: ServeOptions, health_servicer) -> tuple[grpc.Server, int]:
    """The health-only server on ``options.health_port`` (same host, plaintext, no token: the kubelet's
    ``grpc:`` probe): its own thread pool and concurrency cap, every call idle-timed after
    :data:`HEALTH_IDLE_TIMEOUT_S`, so neither the work nor stalled probes on the main port can starve it.
    It serves the same :class:`HealthServicer` as the main port (one SERVING / NOT_SERVING state)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=HEALTH_THREADS, thread_name_prefix="health"),
        interceptors=[IdleStreamTimeout(min(HEALTH_IDLE_TIMEOUT_S, options.idle_timeout_s)), StrictRequests()],
        maximum_concurrent_rpcs=HEALTH_THREADS,
        options=[("grpc.max_receive_message_length", 4096), *CONNECTION_OPTIONS],
    )
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    wanted = 0 if options.port == 0 and options.health_port == DEFAULT_HEALTH_PORT else options.health_port
    address = f"{options.host}:{wanted}"  # an ephemeral main port (tests) makes the default health port one too
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as err:
        raise ServeConfigError(f"--health-port: cannot listen on {address}: {err}") from None
    if port == 0:
        raise ServeConfigError(f"--health-port: cannot listen on {address} (in use, or not a local address)")
    server.start()
    return server, port


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
    # the process ends by the grace + EXIT_SLACK_S even if a handler ignores its time-up and its cancellation
    # (its worker thread would keep the interpreter alive at exit)
    watchdog = threading.Timer(options.grace_s + EXIT_SLACK_S, _forced_exit, args=(running,))
    watchdog.daemon = True
    watchdog.start()
    running.drain(options.grace_s)


def _forced_exit(running: RunningServer) -> None:
    log_event("forced_exit", unfinished_handlers=running.servicer.calls_in_handler)
    for handler in logging.getLogger("parplan.server").handlers:
        handler.flush()
    os._exit(0)


__all__ = ["ServeOptions", "security_warnings", "IdleStreamTimeout", "ServeConfigError", "RunningServer", "start", "serve", "configure_logging",
           "StrictRequests", "DEFAULT_PORT", "DEFAULT_HEALTH_PORT", "DEFAULT_HOST", "HEALTH_SERVICE_NAME", "MAX_REQUEST_BYTES"]
