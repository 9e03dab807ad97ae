"""The health-only port and strict request parsing of server/app.py (issue 36, findings 2 and 5)."""

import threading
import time
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from parplan.server.app import ServeOptions, start  # noqa: E402
from parplan.v1 import planner_pb2 as pb  # noqa: E402
from parplan.v1 import planner_pb2_grpc as pb_grpc  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_heap")  # timed calls: the long suite's heap is not theirs to collect

SEED = Path(__file__).resolve().parents[2] / "examples" / "llama3-70b-64xh100.yaml"

GARBAGE = b"\xff\x00garbage"
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]  # else channels in one process share one connection


def _channel(port: int):
    """A channel with its own TCP connection (as a separate prober or attacker would have)."""
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=OWN_CONNECTION)


@pytest.fixture(scope="module")
def running():
    server = start(ServeOptions(port=0, max_concurrent=1, max_queue=0, idle_timeout_s=30.0))
    yield server
    server.drain(0)


def _silent(release: threading.Event):
    """A request stream that sends nothing until ``release``, then ends."""
    release.wait()
    yield from ()


def _stall(port: int, count: int, release: threading.Event, method: str = "/grpc.health.v1.Health/Check") -> list:
    """``count`` calls of ``method`` over raw channels whose request never comes (until ``release``); at most 16
    per connection (the server takes 32 streams per connection at once)."""
    calls, channels = [], [_channel(port) for _ in range(count // 16 + 1)]

    for i in range(count):
        call = channels[i % len(channels)].stream_unary(method, request_serializer=None, response_deserializer=None)
        calls.append(call.future(_silent(release), timeout=60))
    return calls


def _serving_within_a_second(channel) -> None:
    started = time.monotonic()
    answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING
    assert time.monotonic() - started < 1.0


def test_health_port_answers_serving_with_200_stalled_checks_on_each_port(running):
    release = threading.Event()
    try:
        stalled = _stall(running.port, 200, release) + _stall(running.health_port, 200, release)
        time.sleep(0.5)  # the stalled calls reach the servers (no event to wait on across the wire)
        with _channel(running.health_port) as ch:
            _serving_within_a_second(ch)
    finally:
        release.set()
        for call in stalled:
            call.cancel()


STALLED_METHODS = ("/parplan.v1.PlannerService/Plan", "/grpc.health.v1.Health/Check",
                   "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")


def test_main_port_serves_health_and_plan_with_200_stalled_calls_on_each_service(running):
    """600 calls whose request never comes (200 on each service of the main port) leave room for a health check
    within 1 s and a Plan answered (the pool and gRPC's concurrency cap hold SERVICE_THREADS beyond the slots
    and the queue; the base code's 32 gave RESOURCE_EXHAUSTED to both)."""
    release = threading.Event()
    stalled = []
    try:
        for method in STALLED_METHODS:
            stalled += _stall(running.port, 200, release, method)
        time.sleep(1.0)  # the stalled calls reach the server (no event to wait on across the wire)
        with _channel(running.port) as ch:
            _serving_within_a_second(ch)
            reply = pb_grpc.PlannerServiceStub(ch).Plan(pb.PlanRequest(spec_text=SEED.read_text()), timeout=30)
            assert reply.plans
        assert sum(not call.done() for call in stalled) >= 590  # they were still stalled while we were served
    finally:
        release.set()
        for call in stalled:
            call.cancel()


def test_health_port_is_its_own_and_shares_the_health_state(running):
    assert running.health_port not in (0, running.port)
    assert running.health_server is not None and running.health_server is not running.server


@pytest.mark.parametrize("method,streaming", [
    ("/grpc.health.v1.Health/Check", False),
    ("/grpc.health.v1.Health/Watch", False),
    ("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", True),
    ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", True),
])
@pytest.mark.parametrize("which", ["port", "health_port"])
def test_garbage_bytes_are_invalid_argument(running, method, streaming, which):
    if which == "health_port" and "reflection" in method:
        pytest.skip("the health port serves health only")
    with grpc.insecure_channel(f"127.0.0.1:{getattr(running, which)}") as ch:
        if streaming or method.endswith("Watch"):
            call = ch.stream_stream(method, request_serializer=None, response_deserializer=None)(
                iter([GARBAGE]), timeout=5)
            with pytest.raises(grpc.RpcError) as err:
                list(call)
        else:
            with pytest.raises(grpc.RpcError) as err:
                ch.unary_unary(method, request_serializer=None, response_deserializer=None)(GARBAGE, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
