"""Fuzzing the service: random field values over the proto (hypothesis) and raw bytes on every method.

The server must never crash, and every reply is either an answer or a clear error: INVALID_ARGUMENT with a
field violation (bad input, bytes that are not a protobuf message included). Never UNKNOWN (an escaped
exception) or INTERNAL. A valid spec with one solver parameter out of its range is refused naming that field.
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
from google.rpc import error_details_pb2

from parplan.library.spec_io import load_spec_file
from parplan.wire import convert
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]
BASE = convert.spec_to_message(load_spec_file(REPO / "examples" / "llama3-70b-64xh100-evaluate.yaml")
                               .model_dump(mode="json", exclude_none=True))
METHODS = [f"/parplan.v1.PlannerService/{name}" for name in ("Plan", "PlanStream", "Evaluate", "Pareto")]
EXAMPLES = int(os.environ.get("PARPLAN_FUZZ_EXAMPLES", "150"))  # per test; e.g. 2000 for a long run
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


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


SMALL_SPEC = (REPO / "examples" / "seed-textbook-70b-8k.yaml").read_text()  # 36 choices: a valid spec, solved fast
# (request field, a SolverParameters / top_k value outside the range solver/arguments.py allows)
OUT_OF_RANGE = st.one_of(
    st.tuples(st.just("solver.workers"), st.one_of(st.integers(257, 2**31 - 1), st.integers(-2**31, -1))
              .map(lambda w: {"workers": w})),
    st.tuples(st.just("solver.seed"), st.integers(-2**31, -1).map(lambda v: {"seed": v})),
    st.tuples(st.just("solver.time_limit_s"), st.one_of(st.floats(max_value=0.0), st.floats(min_value=86400.5),
                                                        st.sampled_from([float("nan"), float("inf"), -float("inf")]))
              .map(lambda t: {"time_limit_s": t})),
    st.tuples(st.just("solver.method"), st.integers(3, 2**31 - 1).map(lambda m: {"method": m})),
    st.tuples(st.just("top_k"), st.one_of(st.integers(-2**31, 0), st.integers(101, 2**31 - 1)).map(lambda k: {"top_k": k})),
)
VALID_REST = st.fixed_dictionaries({}, optional={"deterministic": st.booleans(), "workers": st.integers(0, 2),
                                                 "seed": st.integers(0, 2**31 - 1),
                                                 "time_limit_s": st.floats(0.5, 30)})


@settings(max_examples=max(20, EXAMPLES // 3), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(bad=OUT_OF_RANGE, rest=VALID_REST, typed=st.booleans())
def test_valid_spec_with_an_out_of_range_solver_parameter(channel, bad, rest, typed):
    """A VALID spec (typed or text) whose one solver parameter is out of range: INVALID_ARGUMENT naming exactly
    that field (the ranges of solver/arguments.py, as optimize() applies them), never INTERNAL or a solve."""
    field, value = bad
    params = {**rest, **{k: v for k, v in value.items() if k != "top_k"}}
    request = pb.PlanRequest(solver=pb.SolverParameters(**params), top_k=value.get("top_k", 1))
    if typed:
        request.spec.CopyFrom(convert.spec_to_message(load_spec_file(REPO / "examples" / "seed-textbook-70b-8k.yaml")
                                                      .model_dump(mode="json", exclude_none=True)))
    else:
        request.spec_text = SMALL_SPEC
    stub = pb_grpc.PlannerServiceStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.Plan(request, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    status = rpc_status.from_call(err.value)
    bad_request = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad_request)
    assert [v.field for v in bad_request.field_violations] == [field], (bad_request, params)
    OUTCOMES["solver", "INVALID_ARGUMENT"] += 1


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


def test_fuzz_service_benchmark_smoke(tmp_path):
    """benchmarks/fuzz_service.py, 80 requests against a `solver-cli serve` subprocess (~10 s): 0 INTERNAL,
    0 failures, 0 runs past limit + 1 s, the server still SERVING. Every kind but ``large_plan``: specs of
    thousands of layers on tens of thousands of GPUs can still overrun their limit by up to ~1.6 s in the solver
    (benchmarks/README.md, "Fuzzing the service"; the solver's time bounds are issue 23, item 1)."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("fuzz_service", REPO / "benchmarks" / "fuzz_service.py")
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    out = tmp_path / "fuzz.json"
    new = [arg for kind in ("hf_bomb", "sweep", "cancelled") for arg in ("--skip-kind", kind)]  # issue 36: below
    code = fuzz.main(["--count", "80", "--clients", "2", "--seed", "3", "--skip-kind", "large_plan", *new,
                      "--out", str(out)])
    result = json.loads(out.read_text())
    assert code == 0, result
    assert result["requests"] == 80 and result["internal"] == 0 and result["failures"] == 0
    assert result["runs_past_limit_plus_1s"] == 0 and result["server_alive_and_serving"]
    assert result["codes"].get("OK", 0) > 0 and result["codes"].get("INVALID_ARGUMENT", 0) > 0


def _benchmark(name: str):
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fuzz_service_smoke_all_five_rpcs(tmp_path):
    """benchmarks/fuzz_service.py --smoke (200 requests, ~30 s): Plan, PlanStream, Evaluate, Pareto and Sweep all
    called, hf_config_json bombs and random cancellations included; 0 INTERNAL, 0 failures, still SERVING."""
    import json

    out = tmp_path / "fuzz.json"
    code = _benchmark("fuzz_service").main(["--smoke", "--clients", "2", "--seed", "5", "--out", str(out)])
    result = json.loads(out.read_text())
    assert {"sweep", "hf_bomb", "cancelled"} <= set(result["by_kind"]), result["by_kind"]
    assert result["internal"] == 0 and result["unknown"] == 0, result["by_kind"]
    assert code == 0 and result["server_alive_and_serving"], result


def test_abuse_quick(tmp_path):
    """benchmarks/abuse.py --quick: every attack of issue 36 at small size passes (0 INTERNAL among them); 40 fuzzed
    requests (the fuzzer's own tests above send more)."""
    out = tmp_path / "abuse.txt"
    code = _benchmark("abuse").main(["--quick", "--fuzz", "40", "--out", str(out)])
    text = out.read_text()
    assert "FAIL" not in text, text
    assert code == 0, text
