"""A call's server-side state is freed when the call ends, not when the cycle collector next runs.

gRPC refuses new streams on a connection past its concurrent-stream limit while earlier calls' state is alive: when a
malformed request's parse error was kept with its traceback, whose frames held the call's context, 33 malformed
requests with the collector off left every later call on that connection UNAVAILABLE (REFUSED_STREAM), the health
check included (server/handlers.py ``_tolerant_deserializer``). The collector is switched off here so that only
reference counting frees anything: every method, each with bytes that are not its request and with a request the
service refuses, then a health check.
"""

from __future__ import annotations

import gc
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from parplan.v1 import planner_pb2 as pb

SERVICE = "/parplan.v1.PlannerService/"
STREAMING = {"PlanStream", "Sweep"}
# each method's request with a spec (Sweep: a sweep spec) the service refuses, malformed YAML: INVALID_ARGUMENT once parsed
REFUSED = {"Plan": pb.PlanRequest, "PlanStream": pb.PlanStreamRequest, "Evaluate": pb.EvaluateRequest,
           "Pareto": pb.ParetoRequest, "Sweep": pb.SweepRequest, "Replan": pb.ReplanRequest}
PER_KIND = 12  # x 6 methods x 2 kinds: past the concurrent-stream limit the leak hit at 33


def _server_call_states() -> int:
    return sum(1 for o in gc.get_objects() if type(o).__name__ == "_RPCState" and type(o).__module__ == "grpc._server")


@pytest.fixture
def collector_off():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _call(channel, method: str, payload: bytes) -> grpc.StatusCode:
    name = SERVICE + method
    call = channel.unary_stream(name) if method in STREAMING else channel.unary_unary(name)
    try:
        reply = call(payload, timeout=30)
        if method in STREAMING:
            list(reply)
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK


def test_refused_calls_free_their_state_without_the_collector(collector_off):
    from parplan.server.app import ServeOptions, start

    before = _server_call_states()  # another module's server may still hold a call of its own
    running = start(ServeOptions(port=0, max_concurrent=2))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            for method, request in REFUSED.items():
                text = {"sweep_text" if method == "Sweep" else "spec_text": "model: [1, 2"}
                refused = request(**text).SerializeToString()
                for payload in (b"\xff\xfe\x00", refused):
                    codes = {_call(channel, method, payload) for _ in range(PER_KIND)}
                    assert codes == {grpc.StatusCode.INVALID_ARGUMENT}, (method, payload, codes)
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        # the last call's thread may still be finishing after its status reached the client
        deadline = time.monotonic() + 5
        while _server_call_states() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _server_call_states() == before
    finally:
        running.drain(0)
