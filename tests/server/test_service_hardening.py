"""The service under hostile requests (issue 23): no file access from requests, no starvation by stalled calls,
reflection v1, warnings for plaintext tokens. Servers on 127.0.0.1, ephemeral ports."""

from __future__ import annotations

import builtins
import io
import logging
import os
import threading
import time
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_status import rpc_status

from parplan.library.spec_io import load_spec_file
from parplan.wire import convert
from parplan.server.app import ServeOptions, security_warnings, start
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

pytestmark = pytest.mark.usefixtures("fresh_heap")  # timed calls: the long suite's heap is not theirs to collect

REPO = Path(__file__).resolve().parents[2]
LLAMA_EVALUATE = REPO / "examples" / "llama3-70b-64xh100-evaluate.yaml"
SEED = REPO / "examples" / "seed-textbook-70b-8k.yaml"
HF_LLAMA = REPO / "tests" / "data" / "hf" / "llama-3-70b.json"
SERVICE = "parplan.v1.PlannerService"
SECRET = "s3cr3t-line-that-must-not-come-back"
REST = "training: {seq_len: 8192, global_batch_size: 512}\ncluster: {gpu: H100-SXM-80GB, num_gpus: 64}\n"


def violations(err: grpc.RpcError) -> list[tuple[str, str]]:
    out = []
    for detail in rpc_status.from_call(err).details:
        bad = error_details_pb2.BadRequest()
        assert detail.Unpack(bad)
        out += [(v.field, v.description) for v in bad.field_violations]
    return out


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    """An --hf-config-dir with a good config and every kind of bad entry."""
    root = tmp_path_factory.mktemp("hf")
    (root / "llama.json").write_text(HF_LLAMA.read_text())
    (root / "secret.json").write_text(SECRET)
    os.mkfifo(root / "fifo.json")  # opening it for reading would block the server thread
    (root / "link.json").symlink_to("/etc/passwd")
    (root / "linkdir").symlink_to(root)  # a link in the middle of a path
    (root / "dir.json").mkdir()
    with open(root / "huge.json", "wb") as f:
        f.truncate(64 * 2**20)
    return root


@pytest.fixture(scope="module")
def servers(hf_dir):
    plain = start(ServeOptions(port=0, max_concurrent=1))
    allowed = start(ServeOptions(port=0, max_concurrent=1, hf_config_dir=hf_dir))
    yield plain, allowed
    plain.drain(0)
    allowed.drain(0)


@pytest.fixture
def opened(monkeypatch):
    """Every path opened through open(), io.open, Path.open or os.open while the test runs."""
    seen: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *args, **kwargs):
        seen.append(os.fspath(file) if isinstance(file, (str, os.PathLike)) else repr(file))
        return real_open(file, *args, **kwargs)

    def spy_os_open(path, *args, **kwargs):
        seen.append(os.fspath(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(io, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    return seen


def _evaluate(port: int, request: pb.EvaluateRequest, timeout: float = 10.0):
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        return pb_grpc.PlannerServiceStub(ch).Evaluate(request, timeout=timeout)


def _refused(port: int, model_yaml: str) -> tuple[str, str]:
    request = pb.EvaluateRequest(spec_text=f"model: {model_yaml}\n{REST}")
    t0 = time.perf_counter()
    with pytest.raises(grpc.RpcError) as err:
        _evaluate(port, request)
    assert time.perf_counter() - t0 < 5  # a FIFO did not block the call
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
    ((field, description),) = violations(err.value)
    assert SECRET not in description and "root:" not in description and "root:" not in err.value.details()
    return field, description


@pytest.mark.parametrize("name", ["/etc/passwd", "fifo.json", "link.json", "dir.json", "huge.json", "secret.json",
                                  "llama.json"])
def test_without_a_config_dir_no_path_is_opened(servers, hf_dir, opened, name):
    plain, _ = servers
    path = name if name.startswith("/") else str(hf_dir / name)
    field, description = _refused(plain.port, f"{{hf_config: {path}}}")
    assert field == "model.hf_config" and "hf_config_json" in description
    assert not [p for p in opened if path in p], opened


@pytest.mark.parametrize("name, words", [
    ("/etc/passwd", "relative path"), ("../../etc/passwd", "relative path"), ("fifo.json", "not a regular file"),
    ("link.json", "symbolic link"), ("linkdir/llama.json", "symbolic link"), ("dir.json", "not a regular file"),
    ("huge.json", "larger than 1 MiB"), ("missing.json", "no such config"), ("secret.json", "not JSON"),
])
def test_under_a_config_dir_only_regular_files_without_links(servers, hf_dir, opened, name, words):
    _, allowed = servers
    field, description = _refused(allowed.port, f"{{hf_config: {name}}}")
    assert field == "model.hf_config" and words in description, description
    if name != "secret.json":  # only a regular file under the folder is ever opened
        assert not [p for p in opened if name.split("/")[-1] in p or "passwd" in p], opened


def test_a_config_under_the_dir_and_inline_json_give_the_same_model(servers):
    plain, allowed = servers
    fixed = load_spec_file(LLAMA_EVALUATE).model_dump(mode="json", exclude_none=True)
    fixed["model"] = {"name": "llama"}
    from_dir = _evaluate(allowed.port, pb.EvaluateRequest(spec_text=(
        f"model: {{hf_config: llama.json, name: llama}}\n{REST}plan: {fixed['plan']}\n").replace("'", '"')))
    spec = convert.spec_to_message(fixed)
    spec.model.hf_config_json = HF_LLAMA.read_text()
    inline = _evaluate(plain.port, pb.EvaluateRequest(spec=spec))
    assert inline.evaluation.metrics.step_time_s == pytest.approx(from_dir.evaluation.metrics.step_time_s)
    assert inline.status == from_dir.status
    with pytest.raises(grpc.RpcError) as err:
        spec.model.hf_config_json = "{not json " + SECRET
        _evaluate(plain.port, pb.EvaluateRequest(spec=spec))
    ((field, description),) = violations(err.value)
    assert field == "model.hf_config_json" and SECRET not in description


def test_a_typed_preset(servers):
    plain, _ = servers
    spec = pb.Spec(model=pb.ModelSpec(preset="megatron-gpt-1.7b"),
                   training=pb.TrainingSpec(seq_len=2048, global_batch_size=64),
                   cluster=pb.ClusterSpec(gpu="H100-SXM-80GB", num_gpus=8), plan=pb.PlanSpec())
    assert _evaluate(plain.port, pb.EvaluateRequest(spec=spec)).evaluation.plan.tp >= 1
    spec.model.preset = "no-such-model"
    with pytest.raises(grpc.RpcError) as err:
        _evaluate(plain.port, pb.EvaluateRequest(spec=spec))
    assert [f for f, _ in violations(err.value)] == ["model.preset"]


# ------------------------------------------------------------------------------------------ starvation


def test_stalled_streams_do_not_starve_health_or_authenticated_calls(tmp_path):
    """16 stalled streams (8 Plan calls that never send their body, 8 idle reflection streams) on a server with
    auth and the default limits: health answers SERVING within 1 s and an authenticated Plan succeeds."""
    (tmp_path / "token").write_text("tok-123\n")
    running = start(ServeOptions(port=0, auth_token_file=tmp_path / "token"))
    auth = (("authorization", "Bearer tok-123"),)
    never = threading.Event()

    def silent():  # a request stream that sends nothing until the test ends
        never.wait(60)
        return
        yield  # noqa: unreachable - makes this a generator

    stalled = []
    try:
        attacker = grpc.insecure_channel(f"127.0.0.1:{running.port}")
        plan = attacker.stream_unary(f"/{SERVICE}/Plan", request_serializer=None, response_deserializer=None)
        reflect = attacker.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                         request_serializer=None, response_deserializer=None)
        for _ in range(8):
            stalled.append(plan.future(silent(), metadata=auth, timeout=60))
            stalled.append(reflect(silent(), metadata=auth, timeout=60))
        time.sleep(1.0)  # every stalled call has reached the server
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            t0 = time.perf_counter()
            health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=1)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            assert time.perf_counter() - t0 < 1.0
            answer = pb_grpc.PlannerServiceStub(ch).Plan(pb.PlanRequest(spec_text=SEED.read_text()), metadata=auth,
                                                         timeout=30)
            assert answer.status == pb.PLAN_STATUS_OPTIMAL
    finally:
        never.set()
        for call in stalled:
            call.cancel()
        attacker.close()
        running.drain(0)


def test_a_call_that_never_sends_its_body_is_cancelled_after_the_idle_timeout():
    running = start(ServeOptions(port=0, idle_timeout_s=0.5))
    never = threading.Event()

    def silent():
        never.wait(30)
        return
        yield  # noqa

    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            plan = ch.stream_unary(f"/{SERVICE}/Plan", request_serializer=None, response_deserializer=None)
            t0 = time.perf_counter()
            with pytest.raises(grpc.RpcError) as err:
                plan(silent(), timeout=20)
            assert err.value.code() == grpc.StatusCode.CANCELLED
            assert time.perf_counter() - t0 < 3.0
    finally:
        never.set()
        running.drain(0)


def test_reflection_v1_and_v1alpha():
    running = start(ServeOptions(port=0))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            for version in ("v1", "v1alpha"):  # v1 is v1alpha's messages under another package, field for field
                call = ch.stream_stream(f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                                        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                                        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
                (reply,) = list(call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5))
                names = {s.name for s in reply.list_services_response.service}
                assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                        "grpc.reflection.v1alpha.ServerReflection"} <= names
                (reply,) = list(call(iter([reflection_pb2.ServerReflectionRequest(
                    file_containing_symbol=f"grpc.reflection.{version}.ServerReflection")]), timeout=5))
                assert reply.file_descriptor_response.file_descriptor_proto, version
    finally:
        running.drain(0)


# ------------------------------------------------------------------------------------------ warnings


def test_warnings_for_plaintext_tokens_and_non_loopback_binding(tmp_path, caplog):
    token = tmp_path / "token"
    token.write_text("t\n")
    assert security_warnings(ServeOptions()) == []
    assert security_warnings(ServeOptions(host="::1")) == []
    (beyond,) = security_warnings(ServeOptions(host="0.0.0.0"))
    assert "without TLS" in beyond
    assert len(security_warnings(ServeOptions(host="0.0.0.0", auth_token_file=token))) == 2
    assert security_warnings(ServeOptions(host="0.0.0.0", tls_cert=token, tls_key=token)) == []
    with caplog.at_level(logging.INFO, logger="parplan.server"):
        running = start(ServeOptions(port=0, auth_token_file=token))
        running.drain(0)
    assert any('"event": "warning"' in r.getMessage() and "plaintext" in r.getMessage() for r in caplog.records)


# ----------------------------------------- issue 36, finding 3: hf_config_json fields checked before arithmetic

HF_BAD = {  # (config.json, the field the violation names); each answered INTERNAL or grew RSS at ba9489c
    "string_layers_huge_width": ('{"model_type":"qwen2","num_hidden_layers":"80","hidden_size":1099511627776,'
                                 '"num_attention_heads":64,"num_key_value_heads":8,"intermediate_size":28672,'
                                 '"vocab_size":128256}', "model.hf_config_json.num_hidden_layers"),
    "zero_heads": ('{"model_type":"llama","num_hidden_layers":80,"hidden_size":8192,"num_attention_heads":0,'
                   '"intermediate_size":28672,"vocab_size":128256}', "model.hf_config_json.num_attention_heads"),
    "infinite_window": ('{"model_type":"gemma3_text","num_hidden_layers":2,"hidden_size":1024,'
                        '"num_attention_heads":8,"intermediate_size":4096,"vocab_size":1000,"sliding_window":1e999,'
                        '"layer_types":["sliding_attention","full_attention"]}', "model.hf_config_json.sliding_window"),
    "infinity_literal": ('{"model_type":"gpt_oss","num_hidden_layers":2,"hidden_size":1024,"num_attention_heads":8,'
                         '"intermediate_size":4096,"vocab_size":1000,"num_local_experts":4,"num_experts_per_tok":2,'
                         '"swiglu_limit":Infinity}', "model.hf_config_json.swiglu_limit"),
    "layers_5000_digits": ('{"model_type":"llama","num_hidden_layers":' + "9" * 5000 + ',"hidden_size":8192,'
                           '"num_attention_heads":64,"vocab_size":128256}', "model.hf_config_json.num_hidden_layers"),
}


@pytest.mark.parametrize("case", sorted(HF_BAD))
def test_hf_config_json_fields_are_checked_before_any_arithmetic(servers, case):
    import psutil

    text, field = HF_BAD[case]
    plain, _ = servers
    spec = convert.spec_to_message(load_spec_file(LLAMA_EVALUATE).model_dump(mode="json", exclude_none=True))
    spec.model.Clear()
    spec.model.hf_config_json = text
    rss0 = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    with grpc.insecure_channel(f"127.0.0.1:{plain.port}") as ch:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.PlannerServiceStub(ch).Plan(pb.PlanRequest(spec=spec), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert time.perf_counter() - t0 < 2
    assert psutil.Process().memory_info().rss - rss0 < 64 * 2**20
    ((named, _),) = violations(err.value)
    assert named == field


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"{record.name} {record.levelname} {record.getMessage()}")


UNARY_REQUEST_METHODS = ["Plan", "Evaluate", "Pareto", "PlanStream", "Sweep"]


@pytest.mark.parametrize("ending", ["deadline", "cancel"])
def test_a_call_that_ends_while_its_request_is_read_is_the_callers_doing(ending):
    """Issue 36, finding 5: a call whose deadline passes (or that is cancelled) before its one request message has
    come ends DEADLINE_EXCEEDED / CANCELLED on every planner method: no ``internal_error`` line and no error from
    gRPC's server (the base code re-raised or returned None: 'Exception serializing message!')."""
    running = start(ServeOptions(port=0, max_concurrent=1, idle_timeout_s=30.0))
    records = _Records()
    loggers = [logging.getLogger("parplan.server"), logging.getLogger("grpc._server"), logging.getLogger("grpc")]
    for logger in loggers:
        logger.addHandler(records)
    release = threading.Event()

    def silent():
        release.wait()
        yield from ()

    try:
        calls = []
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            for method in UNARY_REQUEST_METHODS:
                stub = channel.stream_stream(f"/parplan.v1.PlannerService/{method}", request_serializer=None,
                                             response_deserializer=None)
                calls.append(stub(silent(), timeout=0.5 if ending == "deadline" else 30))
            time.sleep(0.2)  # the calls reach their handlers (no event to wait on across the wire)
            if ending == "cancel":
                for call in calls:
                    call.cancel()
            time.sleep(1.0)  # past the deadline: the handlers see the end of their calls and log (or not)
            for call in calls:
                with pytest.raises(grpc.RpcError) as err:
                    list(call)
                assert err.value.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
    finally:
        release.set()
        for logger in loggers:
            logger.removeHandler(records)
        running.drain(0)
    bad = [line for line in records.lines if "internal_error" in line or " ERROR " in line or "Traceback" in line]
    assert not bad, bad
