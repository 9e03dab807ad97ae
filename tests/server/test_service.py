"""The gRPC service on a real server on 127.0.0.1 (ephemeral ports): health, reflection, errors with field paths,
the same plan four ways, deadline, cancellation, concurrency limit, auth, TLS, request size, streaming, logs,
and SIGTERM drain of a `solver-cli serve` subprocess.

Long solves: for the deadline and drain tests, the DeepSeek-V3 spec (29,567 choices) with ``top_k=20`` on one
CP-SAT worker, ~6 s (its first ~0.5 s builds the problem, which does not watch ``SolverControls.cancel``); for the
cancellation and limit tests, llama3-70b's memory frontier on one worker, ~11 s, all of it CP-SAT solves (which
watch the cancel: it stops in milliseconds). The seed-textbook spec (36 choices) solves in 0.2 s: the Pareto test's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
import yaml
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status
from typer.testing import CliRunner

from tests.conftest import self_signed_certificate
from parplan.client.cli import app
from parplan.library.contract import plan_result_to_dict
from parplan.client.grpc_client import PlannerClient
from parplan.library.spec_io import load_spec_file
from parplan.wire import convert
from parplan.server.app import ServeOptions, start
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

pytestmark = pytest.mark.usefixtures("fresh_heap")  # timed calls: the long suite's heap is not theirs to collect

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "examples" / "llama3-70b-64xh100.yaml"
LLAMA_EVALUATE = REPO / "examples" / "llama3-70b-64xh100-evaluate.yaml"
SEED = REPO / "examples" / "seed-textbook-70b-8k.yaml"
LONG_SPEC = REPO / "examples" / "deepseek-v3-2048xh800.yaml"
LONG = dict(top_k=20, solver=pb.SolverParameters(workers=1, time_limit_s=30))
CANCELLABLE = pb.PlanRequest(spec_text=LLAMA.read_text(), pareto_axis=pb.PARETO_AXIS_MEMORY,
                             solver=pb.SolverParameters(workers=1, time_limit_s=30))
SERVICE = "parplan.v1.PlannerService"


@pytest.fixture(scope="module")
def stub(channel):
    return pb_grpc.PlannerServiceStub(channel)


def wait_until(predicate, timeout_s: float, step_s: float = 0.02) -> float:
    """Seconds until ``predicate()`` held (fails after ``timeout_s``)."""
    t0 = time.perf_counter()
    while not predicate():
        assert time.perf_counter() - t0 < timeout_s, "condition not reached in time"
        time.sleep(step_s)
    return time.perf_counter() - t0


def bad_request(err: grpc.RpcError) -> list[tuple[str, str]]:
    status = rpc_status.from_call(err)
    assert status is not None, "INVALID_ARGUMENT must carry a google.rpc.Status"
    out = []
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        assert detail.Unpack(bad)
        out += [(v.field, v.description) for v in bad.field_violations]
    return out


def spec_message(path: Path, **changes) -> pb.Spec:
    data = load_spec_file(path).model_dump(mode="json", exclude_none=True)
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split("__")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return convert.spec_to_message(data)


# ----------------------------------------------------------------------------------- health, reflection


def test_health_serving(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(channel):
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                           timeout=5)
    names = {s.name for reply in replies for s in reply.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health"} <= names
    replies = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(
        file_containing_symbol=SERVICE)]), timeout=5)
    assert any(reply.file_descriptor_response.file_descriptor_proto for reply in replies)


# ------------------------------------------------------------------------------------------ bad input


LLAMA_TEXT = LLAMA.read_text()


# every ParplanError (SpecError, PlanError, UnknownGPU, ArgumentError, RequestError, ConversionError): the field
# violation names the exact field, as spec.yaml names it (plan.micro_batch_size) or the request field
@pytest.mark.parametrize("request_, field, words", [
    (pb.PlanRequest(spec=spec_message(LLAMA, model__num_layers=0)), "model.num_layers", "greater than 0"),
    (pb.PlanRequest(spec=spec_message(LLAMA, cluster__gpu="H900")), "cluster.gpu", "unknown GPU"),
    (pb.PlanRequest(spec=spec_message(LLAMA, search__tp=[4, 0])), "search.tp[1]", "greater than 0"),
    (pb.PlanRequest(spec_text="model: [1, 2"), "spec_text", "malformed YAML"),
    (pb.PlanRequest(spec_text="model:\n  num_layers: -1\n"), "model.num_layers", "model.num_layers"),
    (pb.PlanRequest(spec_text=LLAMA_TEXT + "plan: {micro_batch_size: -1}\n"), "plan.micro_batch_size",
     "greater than 0"),
    (pb.PlanRequest(spec_text=LLAMA_TEXT + "assumptions: {nope: 1}\n"), "assumptions.nope", "nope"),
    (pb.PlanRequest(), "spec_source", "spec_text"),
    (pb.PlanRequest(spec_text=LLAMA_TEXT, solver=pb.SolverParameters(time_limit_s=-1)),
     "solver.time_limit_s", "0 < t"),
    (pb.PlanRequest(spec_text=LLAMA_TEXT, solver=pb.SolverParameters(time_limit_s=float("nan"))),
     "solver.time_limit_s", "0 < t"),
    (pb.PlanRequest(spec_text=LLAMA_TEXT, solver=pb.SolverParameters(workers=1000)), "solver.workers",
     "from 0 to 256"),
    (pb.PlanRequest(spec_text=LLAMA_TEXT, solver=pb.SolverParameters(seed=-1)), "solver.seed", "from 0 to"),
    (pb.PlanRequest(spec_text=LLAMA_TEXT, top_k=0), "top_k", "from 1 to 100"),
    (pb.PlanRequest(spec=pb.Spec(training=pb.TrainingSpec(precision=9))), "training.precision", "unknown"),
])
def test_bad_input_is_invalid_argument_naming_the_field(stub, request_, field, words):
    with pytest.raises(grpc.RpcError) as err:
        stub.Plan(request_, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    violations = bad_request(err.value)
    assert len(violations) == 1
    got_field, description = violations[0]
    assert got_field == field, violations
    assert words in description and "\n" not in description


def test_typed_spec_field_violations(stub):
    """The typed spec: a plan field and an unknown knob name their spec paths too."""
    spec = spec_message(LLAMA)
    spec.plan.micro_batch_size = -1
    with pytest.raises(grpc.RpcError) as err:
        stub.Plan(pb.PlanRequest(spec=spec), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in bad_request(err.value)] == ["plan.micro_batch_size"]
    spec = spec_message(LLAMA)
    spec.assumptions.overrides["nope"].integer_value = 1
    with pytest.raises(grpc.RpcError) as err:
        stub.Plan(pb.PlanRequest(spec=spec), timeout=30)
    assert [f for f, _ in bad_request(err.value)] == ["assumptions.nope"]


@pytest.mark.parametrize("method, body", [
    ("/parplan.v1.PlannerService/Plan", b"\xff\xff\xff\xff"),
    ("/parplan.v1.PlannerService/Evaluate", b"\x0a\x05abc"),
    ("/parplan.v1.PlannerService/PlanStream", b"\x12\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80"),
])
def test_malformed_request_body_is_invalid_argument(channel, method, body):
    """Bytes that are not a protobuf message: INVALID_ARGUMENT naming the request, not INTERNAL."""
    if method.endswith("PlanStream"):
        call = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as err:
            list(call(body, timeout=10))
    else:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as err:
            call(body, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    assert [f for f, _ in bad_request(err.value)] == ["request"]


def test_evaluate_bad_plan_names_the_plan_field(stub):
    request = pb.EvaluateRequest(spec_text=LLAMA.read_text(), plan=pb.PlanSpec(tp=3, pp=1))
    with pytest.raises(grpc.RpcError) as err:
        stub.Evaluate(request, timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ((field, description),) = bad_request(err.value)
    assert field.startswith("plan") and "cluster.num_gpus" in description


def test_nothing_fits_is_an_answer_not_an_error(stub):
    spec_text = (REPO / "examples" / "infeasible" / "8b-gbs-below-pp.yaml").read_text()
    reply = stub.Plan(pb.PlanRequest(spec_text=spec_text, solver=pb.SolverParameters(deterministic=True)),
                      timeout=60)
    assert reply.status == pb.PLAN_STATUS_INFEASIBLE
    assert reply.explanation.summary and not reply.plans


# ------------------------------------------------------------------------------- one plan, four ways


def test_same_plan_via_library_cli_server_and_raw_grpc(server, stub):
    spec = load_spec_file(LLAMA)
    library = plan_result_to_dict(optimize(spec, top_k=2, controls=SolverControls(deterministic=True)))
    runner = CliRunner()
    args = ["optimize", str(LLAMA), "--top", "2", "--deterministic", "--format", "json", "--no-per-framework"]
    cli_local = runner.invoke(app, args)
    cli_remote = runner.invoke(app, args + ["--server", f"127.0.0.1:{server.port}"])
    assert cli_local.exit_code == 0 and cli_remote.exit_code == 0, cli_remote.output
    raw = stub.Plan(pb.PlanRequest(spec_text=LLAMA.read_text(), top_k=2, contract_json=True,
                                   solver=pb.SolverParameters(deterministic=True)), timeout=60)
    raw_dict = convert.plan_result_dict(raw)
    expected = json.loads(json.dumps(library))  # deterministic: no timing, so nothing differs run to run
    assert "timing" not in expected
    assert json.loads(cli_local.stdout) == expected
    assert json.loads(cli_remote.stdout) == expected
    assert raw_dict == expected
    assert cli_remote.stdout == cli_local.stdout  # the text itself, byte for byte
    assert raw.contract_json + "\n" == cli_local.stdout  # the service offers the CLI's JSON, byte for byte
    assert raw.solver.ortools_version and raw.parameters.deterministic
    assert not raw.HasField("timing") and raw.solver.wall_time_s == 0  # the deprecated field: 0 without timing


def test_typed_client_returns_the_library_type(server):
    spec = load_spec_file(LLAMA)
    with PlannerClient(f"127.0.0.1:{server.port}") as client:
        remote = client.plan(spec, deterministic=True)
        evaluation = client.evaluate(load_spec_file(LLAMA_EVALUATE))
    local = optimize(spec, controls=SolverControls(deterministic=True))
    assert type(remote) is type(local)
    assert remote.plans == local.plans and remote.status == local.status
    from parplan.library.evaluation import evaluate_spec

    assert evaluation == evaluate_spec(load_spec_file(LLAMA_EVALUATE))


def test_plan_stream_sends_progress_then_the_result(server):
    with PlannerClient(f"127.0.0.1:{server.port}") as client:
        events = list(client.plan_stream(load_spec_file(LLAMA), deterministic=True))
    assert events[-1].result is not None and all(e.result is None for e in events[:-1])
    progress = [e for e in events if e.progress is not None]
    assert progress, "at least one improving plan is streamed"
    times = [e.progress.metrics.step_time_s for e in progress]
    assert times == sorted(times, reverse=True)  # improving
    assert events[-1].result.plans[0].metrics.step_time_s <= times[-1] + 1e-9


def test_pareto_rpc_matches_the_library(stub):
    spec = load_spec_file(SEED)  # ~1 s (llama3-70b's frontier, 49 points, takes ~30 s)
    local = optimize(spec, pareto="memory", controls=SolverControls(deterministic=True))
    reply = stub.Pareto(pb.ParetoRequest(spec_text=SEED.read_text(), axis=pb.PARETO_AXIS_MEMORY,
                                         solver=pb.SolverParameters(deterministic=True)), timeout=60)
    points = [convert.message_to_dict(p, omit_unset=False) for p in reply.points]
    assert points == plan_result_to_dict(local)["pareto"] and len(points) >= 2


def test_every_reply_names_the_version_and_offers_the_clis_json(stub):
    """Issue 42: one JSON shape for machines. Evaluate and Pareto (the GPU frontier) answer, when asked, in the
    CLI's JSON (numbers as numbers, enums as the spec's values), every plan with its num_gpus, every reply with
    the parplan version; unasked, contract_json stays empty."""
    import parplan
    from parplan.costmodel.evaluation.prediction_band import band_source
    from parplan.library.contract import evaluation_to_dict
    from parplan.library.evaluation import evaluate_spec

    reply = stub.Evaluate(pb.EvaluateRequest(spec_text=LLAMA_EVALUATE.read_text(), contract_json=True), timeout=60)
    assert reply.parplan_version == parplan.__version__
    spec = load_spec_file(LLAMA_EVALUATE)
    assert json.loads(reply.contract_json) == json.loads(json.dumps(evaluation_to_dict(  # with its band, as the CLI's
        evaluate_spec(spec), source=band_source(spec))))
    assert reply.band_source.calibration == "default" and reply.evaluation.band.step_time_s_high > 0
    plan = json.loads(reply.contract_json)["plans"][0]["plan"]
    assert plan["tp"] == 4 and plan["schedule"] == "interleaved" and plan["num_gpus"] == reply.evaluation.plan.num_gpus == 64
    frontier = stub.Pareto(pb.ParetoRequest(spec_text=SEED.read_text(), axis=pb.PARETO_AXIS_GPUS, contract_json=True,
                                            solver=pb.SolverParameters(deterministic=True)), timeout=120)
    assert frontier.parplan_version == parplan.__version__ and len(frontier.points) >= 1
    local = plan_result_to_dict(optimize(load_spec_file(SEED), pareto="gpus",
                                         controls=SolverControls(deterministic=True)))
    assert json.loads(frontier.contract_json) == json.loads(json.dumps(local))
    for point, entry in zip(frontier.points, local["pareto"]):
        p = point.plan
        assert p.num_gpus == p.tp * p.cp * p.pp * p.dp == entry["plan"]["num_gpus"]
    plain = stub.Plan(pb.PlanRequest(spec_text=SEED.read_text(), solver=pb.SolverParameters(deterministic=True)),
                      timeout=60)
    assert plain.contract_json == "" and plain.parplan_version == parplan.__version__


# -------------------------------------------------------------------- deadline, cancellation, limits


def test_deadline_caps_the_solver_time_limit(stub):
    reply = stub.Plan(pb.PlanRequest(spec_text=LLAMA.read_text()), timeout=20)
    assert reply.parameters.time_limit_s < 20  # the deadline, less a margin for the answer
    unbounded = stub.Plan(pb.PlanRequest(spec_text=LLAMA.read_text()), timeout=None)
    assert unbounded.parameters.time_limit_s == 60.0  # the CLI's default


def test_deadline_stops_the_solve(server, stub):
    """A 1 s deadline on a solve of several seconds (DeepSeek-V3's research space, top 20 on one worker: 5.2 s cold,
    3.6 s warm in-process on this machine): the answer (the best plan so far) or DEADLINE_EXCEEDED comes by the
    deadline, and the solve is over within a second of it."""
    spec_text = yaml.safe_dump({**yaml.safe_load(LONG_SPEC.read_text()), "framework": "any"})
    t0 = time.perf_counter()
    try:
        reply = stub.Plan(pb.PlanRequest(spec_text=spec_text, **LONG), timeout=1.0)
        assert reply.status in (pb.PLAN_STATUS_FEASIBLE, pb.PLAN_STATUS_UNKNOWN)  # not proven in time
        assert reply.parameters.time_limit_s < 1.0
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: server.servicer.active_calls == 0, timeout_s=2.0)
    assert time.perf_counter() - t0 < 1.0 + 1.0


def test_cancellation_stops_the_solve_and_frees_the_cpu(server, stub):
    future = stub.Plan.future(CANCELLABLE, timeout=60)
    wait_until(lambda: server.servicer.active_calls == 1, timeout_s=5)
    time.sleep(0.5)  # inside the solve
    busy = time.process_time()
    wait_until(lambda: time.process_time() - busy > 0.1, timeout_s=10)  # the solve is using a core (any load)
    assert not future.done()
    future.cancel()
    stopped_after = wait_until(lambda: server.servicer.active_calls == 0, timeout_s=1.0)
    assert stopped_after < 1.0
    idle = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - idle < 0.1, "no solver thread keeps running after the cancel"


def test_cancel_right_after_the_call_starts_stops_the_solve(server, stub):
    future = stub.Plan.future(CANCELLABLE, timeout=60)
    wait_until(lambda: server.servicer.active_calls == 1, timeout_s=5, step_s=0.005)
    future.cancel()
    try:
        wait_until(lambda: server.servicer.active_calls == 0, timeout_s=1.0)
    finally:
        wait_until(lambda: server.servicer.active_calls == 0, timeout_s=30)  # leave the server idle


@contextlib.contextmanager
def _one_slot_taken(max_queue: int):
    """A server with one solver slot and a queue of ``max_queue``, the slot held by a cancellable call: yields the
    server, a channel, a stub and that call; drained after."""
    running = start(ServeOptions(port=0, max_concurrent=1, max_queue=max_queue))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.PlannerServiceStub(ch)
            first = stub.Plan.future(CANCELLABLE, timeout=60)
            wait_until(lambda: running.servicer.active_calls == 1, timeout_s=5)
            yield running, ch, stub, first
    finally:
        running.drain(0)


def test_calls_wait_for_a_slot_and_only_past_the_queue_bound_are_refused():
    with _one_slot_taken(max_queue=1) as (running, ch, stub, first):
        queued = stub.Plan.future(pb.PlanRequest(spec_text=SEED.read_text()), timeout=60)
        wait_until(lambda: running.servicer.admission.queued == 1, timeout_s=5)
        t0 = time.perf_counter()
        with pytest.raises(grpc.RpcError) as err:  # the queue (1) is full: refused at once
            stub.Evaluate(pb.EvaluateRequest(spec_text=LLAMA_EVALUATE.read_text()), timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert time.perf_counter() - t0 < 1.0
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=2)
        assert health.status == health_pb2.HealthCheckResponse.SERVING  # health never waits for a slot
        time.sleep(0.5)
        first.cancel()
        answer = queued.result()  # the queued call got the slot once the first one ended
        assert answer.status == pb.PLAN_STATUS_OPTIMAL
        assert answer.admission.queue_wait_s >= 0.5 and answer.admission.queue_length == 0
        assert (answer.admission.solver_slots, answer.admission.max_queue) == (1, 1)
        wait_until(lambda: running.servicer.active_calls == 0, timeout_s=2)
        assert stub.Evaluate(pb.EvaluateRequest(spec_text=LLAMA_EVALUATE.read_text()), timeout=30).evaluation.plan.tp


def test_a_queued_call_gives_up_at_its_deadline():
    with _one_slot_taken(max_queue=4) as (running, _, stub, first):
        t0 = time.perf_counter()
        with pytest.raises(grpc.RpcError) as err:
            stub.Plan(pb.PlanRequest(spec_text=SEED.read_text()), timeout=1.0)
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.perf_counter() - t0 < 2.0
        wait_until(lambda: running.servicer.admission.queued == 0, timeout_s=1)
        first.cancel()


def test_request_size_limit(stub):
    too_big = "#" * (5 * 2**20)
    with pytest.raises(grpc.RpcError) as err:
        stub.Plan(pb.PlanRequest(spec_text=too_big), timeout=10)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    just_over_spec_limit = "#" * (4 * 2**20 + 1)
    with pytest.raises(grpc.RpcError) as err:
        stub.Plan(pb.PlanRequest(spec_text=just_over_spec_limit), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request(err.value)[0][0] == "spec_text"


# ----------------------------------------------------------------------------------------- auth, TLS


def test_auth_requires_the_bearer_token(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    running = start(ServeOptions(port=0, auth_token_file=token_file))
    request = pb.EvaluateRequest(spec_text=LLAMA_EVALUATE.read_text())
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.PlannerServiceStub(ch)
            for metadata in ((), (("authorization", "Bearer wrong"),), (("authorization", "s3cret-token"),)):
                with pytest.raises(grpc.RpcError) as err:
                    stub.Evaluate(request, timeout=10, metadata=metadata)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            ok = stub.Evaluate(request, timeout=30, metadata=(("authorization", "Bearer s3cret-token"),))
            assert ok.status == pb.PLAN_STATUS_FEASIBLE
            health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING  # probes carry no token
        with PlannerClient(f"127.0.0.1:{running.port}", token="s3cret-token") as client:
            assert client.evaluate(load_spec_file(LLAMA_EVALUATE)).plan.tp >= 1
    finally:
        running.drain(0)


def test_tls_with_a_certificate_the_test_makes(tmp_path):
    cert_path, key_path = self_signed_certificate(tmp_path)
    running = start(ServeOptions(port=0, tls_cert=cert_path, tls_key=key_path))
    request = pb.EvaluateRequest(spec_text=LLAMA_EVALUATE.read_text())
    try:
        with PlannerClient(f"127.0.0.1:{running.port}", root_certificates=cert_path.read_bytes()) as client:
            assert client.evaluate(load_spec_file(LLAMA_EVALUATE)).plan.tp >= 1
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as plain:
            with pytest.raises(grpc.RpcError) as err:
                pb_grpc.PlannerServiceStub(plain).Evaluate(request, timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # no plaintext on a TLS port
    finally:
        running.drain(0)


# ------------------------------------------------------------------------------------------------ logs


def test_one_json_log_line_per_call_with_request_id_and_latency(stub, caplog):
    with caplog.at_level(logging.INFO, logger="parplan.server"):
        reply, call = stub.Evaluate.with_call(pb.EvaluateRequest(spec_text=LLAMA_EVALUATE.read_text()), timeout=30,
                                              metadata=(("x-request-id", "req-42"),))
    assert dict(call.initial_metadata())["x-request-id"] == "req-42"
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "parplan.server"]
    (line,) = [entry for entry in lines if entry.get("request_id") == "req-42"]
    assert line["event"] == "rpc" and line["method"] == "Evaluate" and line["code"] == "OK"
    assert line["latency_ms"] > 0 and line["plan_status"] == "FEASIBLE"


# ---------------------------------------------------------------------------------------- SIGTERM drain


def _serve_subprocess(*args: str) -> tuple[subprocess.Popen, int, list[dict]]:
    return serve_process([sys.executable, "-m", "parplan.client.cli", "serve", "--port", "0", *args])


def serve_process(argv: list[str]) -> tuple[subprocess.Popen, int, list[dict]]:
    """Start a server process (``argv``) and read its JSON log lines from stderr as they come: (the process, its
    port from the ``serving`` line, the lines so far, a list that keeps growing)."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    lines: list[dict] = []
    port: list[int] = []

    def read():
        for raw in proc.stderr:
            try:
                entry = json.loads(raw)
            except ValueError:
                entry = {"text": raw}
            lines.append(entry)
            if entry.get("event") == "serving":
                port.append(int(entry["address"].rsplit(":", 1)[1]))

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_until(lambda: port or proc.poll() is not None, timeout_s=60, step_s=0.05)
    except AssertionError:
        proc.kill()
        raise
    assert port, f"server did not start: {lines}"
    return proc, port[0], lines


def test_sigterm_drains_then_exits():
    grace_s = 8  # the short call below ends well within it on a loaded 2-core machine (time-up at 7 s)
    proc, port, lines = _serve_subprocess("--max-concurrent", "2", "--grace-period", str(grace_s))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.PlannerServiceStub(ch)
            health = health_pb2_grpc.HealthStub(ch)
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
            # one call first, so the short call below is not also paying the solver's first import under load
            assert stub.Plan(pb.PlanRequest(spec_text=LLAMA.read_text()), timeout=60).status == pb.PLAN_STATUS_OPTIMAL
            short = stub.Plan.future(pb.PlanRequest(spec_text=LLAMA.read_text(),
                                                    solver=pb.SolverParameters(deterministic=True)), timeout=60)
            # DeepSeek-V3's memory frontier on one worker: about 35 s here, far past the grace on any machine
            long = stub.Plan.future(pb.PlanRequest(spec_text=LONG_SPEC.read_text(), pareto_axis=pb.PARETO_AXIS_MEMORY,
                                                   solver=pb.SolverParameters(workers=1, time_limit_s=30)), timeout=60)
            time.sleep(0.3)
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            wait_until(lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=2).status
                       == health_pb2.HealthCheckResponse.NOT_SERVING, timeout_s=2)
            with pytest.raises(grpc.RpcError) as refused:
                stub.Plan(pb.PlanRequest(spec_text=LLAMA.read_text()), timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert short.result(timeout=10).status == pb.PLAN_STATUS_OPTIMAL  # finished within the grace
            # longer than the grace: timed up 1 s before its end, it answers with what it has (a status, not an
            # error; tests/server/test_service_drain.py checks the plans of a call that has found some)
            answer = long.result(timeout=10)
            assert time.perf_counter() - t0 < grace_s
            assert answer.status in (pb.PLAN_STATUS_OPTIMAL, pb.PLAN_STATUS_FEASIBLE, pb.PLAN_STATUS_UNKNOWN)
        assert proc.wait(timeout=10) == 0
        assert time.perf_counter() - t0 <= grace_s + 1.0
        events = [entry.get("event") for entry in lines]
        assert "draining" in events and "stopped" in events
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------ cold start


@pytest.mark.parametrize("command", [["--help"], ["validate", str(LLAMA)], ["optimize", str(LLAMA), "--server"]],
                         ids=["help", "validate", "optimize-server"])
def test_cli_paths_that_never_import_ortools(server, command):
    """``--help``, ``validate`` and ``optimize --server`` stay clear of OR-Tools (benchmarks/cli_startup.py
    times them)."""
    if command[-1] == "--server":
        command = command + [f"127.0.0.1:{server.port}", "--format", "json"]
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "parplan.client.cli", *command], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in run.stderr.splitlines()
                if line.startswith("import time:")}
    assert "parplan" in imported and "ortools" not in imported
