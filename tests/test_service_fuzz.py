"""Fuzzing the service: random field values over the proto (hypothesis) and raw bytes on every method.

The server must never crash, and every reply is either an answer or a clear error: INVALID_ARGUMENT with a
field violation (bad input), or gRPC's own INTERNAL "Exception deserializing request!" for bytes that are not
a protobuf message. Never UNKNOWN (an escaped exception) or INTERNAL from the service code.
About 500 examples in all, ~10 s; ``PARPLAN_FUZZ_EXAMPLES=2000`` (per test) for a long run.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from grpc_status import rpc_status

from parplan.client.spec_io import load_spec_file
from parplan.server import convert
from parplan.server.app import ServeOptions, start
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[1]
BASE = convert.spec_to_message(load_spec_file(REPO / "examples" / "llama3-70b-64xh100-evaluate.yaml")
                               .model_dump(mode="json", exclude_none=True))
METHODS = [f"/parplan.v1.PlannerService/{name}" for name in ("Plan", "PlanStream", "Evaluate", "Pareto")]
EXAMPLES = int(os.environ.get("PARPLAN_FUZZ_EXAMPLES", "150"))  # per test; e.g. 2000 for a long run
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


@pytest.fixture(scope="module")
def server():
    running = start(ServeOptions(port=0, max_concurrent=2))
    yield running
    running.drain(0)


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch


INT64 = st.one_of(st.integers(-3, 300), st.integers(-2**63, 2**63 - 1), st.sampled_from([2**53, 2**53 + 1, 2**31]))
DOUBLE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(-10, 1e4))
TEXT = st.one_of(st.text(max_size=40), st.sampled_from(["H100", "H100-SXM-80GB", "", "1f1b", "\x00", "é" * 30]))


def _scalar(field: FieldDescriptor):
    if field.enum_type is not None:
        return st.integers(-2, 8)  # proto3 enums are open: numbers the proto does not define arrive too
    return {FieldDescriptor.TYPE_INT64: INT64, FieldDescriptor.TYPE_INT32: st.integers(-2**31, 2**31 - 1),
            FieldDescriptor.TYPE_DOUBLE: DOUBLE, FieldDescriptor.TYPE_BOOL: st.booleans(),
            FieldDescriptor.TYPE_STRING: TEXT}[field.type]


@st.composite
def mutated(draw, message, depth: int = 0):
    """``message`` with a few of its fields (recursively) set to random values or cleared."""
    message = type(message).FromString(message.SerializeToString())
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(list(message.DESCRIPTOR.fields)))
        target = getattr(message, field.name)
        if draw(st.booleans()) and draw(st.booleans()):
            message.ClearField(field.name)
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = draw(st.one_of(st.sampled_from(["grad_bytes", "include_latency", "min_tokens_per_cp_rank",
                                                  "matmul_efficiency"]), st.text(max_size=12)))
            value = target[key]
            kind = draw(st.sampled_from(["number_value", "integer_value", "bool_value", "string_value", None]))
            if kind is not None:
                value.MergeFrom(pb.ScalarValue(**{kind: draw(_scalar(pb.ScalarValue.DESCRIPTOR.fields_by_name[kind]))}))
        elif field.message_type is not None:
            if field.is_repeated or depth >= 2:
                continue
            target.CopyFrom(draw(mutated(target, depth + 1)))
        elif field.is_repeated:
            del target[:]
            target.extend(draw(st.lists(_scalar(field), max_size=4)))
        else:
            setattr(message, field.name, draw(_scalar(field)))
    return message


OUTCOMES: collections.Counter = collections.Counter()  # (test, code name): how the fuzz was answered


def assert_clear(call, test: str) -> None:
    try:
        call()
        OUTCOMES[test, "OK"] += 1
    except grpc.RpcError as err:
        code, details = err.code(), err.details() or ""
        OUTCOMES[test, code.name] += 1
        if code == grpc.StatusCode.INTERNAL:
            assert details == "Exception deserializing request!", details
            return
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
        assert details and "\n" not in details
        status = rpc_status.from_call(err)
        assert status is not None and status.details, "INVALID_ARGUMENT without a BadRequest"


@FUZZ
@given(spec=mutated(BASE))
def test_evaluate_random_specs(channel, spec):
    stub = pb_grpc.PlannerServiceStub(channel)
    assert_clear(lambda: stub.Evaluate(pb.EvaluateRequest(spec=spec), timeout=30), "specs")


@FUZZ
@given(plan=mutated(BASE.plan))
def test_evaluate_random_plans(channel, plan):
    stub = pb_grpc.PlannerServiceStub(channel)
    assert_clear(lambda: stub.Evaluate(pb.EvaluateRequest(spec=BASE, plan=plan), timeout=30), "plans")


@settings(max_examples=max(1, EXAMPLES * 2 // 5), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(solver=mutated(pb.SolverParameters()), top_k=st.integers(-5, 200), text=st.one_of(TEXT, st.just("model: {")))
def test_plan_random_parameters_and_texts(channel, solver, top_k, text):
    """Bad solver parameters, or a spec text that is not a spec: refused before any solve starts."""
    stub = pb_grpc.PlannerServiceStub(channel)
    assert_clear(lambda: stub.Plan(pb.PlanRequest(spec_text=text, solver=solver, top_k=top_k), timeout=30), "params")


@FUZZ
@given(method=st.sampled_from(METHODS), payload=st.binary(max_size=600))
def test_raw_bytes_on_every_method(channel, method, payload):
    call = channel.unary_unary(method) if not method.endswith("PlanStream") else channel.unary_stream(method)

    def send():
        reply = call(payload, timeout=30)
        if method.endswith("PlanStream"):
            list(reply)

    assert_clear(send, "bytes")


def test_server_still_serving_after_the_fuzz(channel, server):
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert server.servicer.active_calls == 0
    if not OUTCOMES:
        pytest.skip("run with the fuzz tests above")
    print(dict(OUTCOMES))
    # the fuzz reaches the cost model (answers) as well as the validation (refusals)
    assert OUTCOMES["specs", "OK"] > 0 and OUTCOMES["specs", "INVALID_ARGUMENT"] > 0, OUTCOMES
    assert OUTCOMES["plans", "OK"] > 0 and OUTCOMES["plans", "INVALID_ARGUMENT"] > 0, OUTCOMES
