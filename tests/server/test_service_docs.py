"""docs/service.md and the README's Service section, run against a server on 127.0.0.1: the Python blocks (as
written, the port replaced), the grpcurl request body through server reflection from Python (what grpcurl does:
fetch the descriptors, encode the JSON body, call; the real grpcurl too when it is on PATH), and the client's
retry policy for RESOURCE_EXHAUSTED."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha import reflection_pb2

from parplan.server.app import ServeOptions, start
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "service.md").read_text()
README = (REPO / "README.md").read_text()
DEFAULT_TARGET = "127.0.0.1:50051"


@pytest.fixture(scope="module")
def server():
    running = start(ServeOptions(port=0))
    yield running
    running.drain(0)


def python_blocks(text: str, marked: bool) -> list[str]:
    pattern = r"<!-- run by tests/server/test_service_docs.py -->\n```python\n(.*?)```" if marked else r"```python\n(.*?)```"
    return re.findall(pattern, text, flags=re.S)


def run_python(code: str, port: int) -> subprocess.CompletedProcess:
    assert DEFAULT_TARGET in code
    code = code.replace(DEFAULT_TARGET, f"127.0.0.1:{port}")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_docs_python_blocks_run(server):
    blocks = python_blocks(DOC, marked=True)
    assert len(blocks) == 3
    plan = run_python(blocks[0], server.port)
    assert plan.returncode == 0, plan.stderr[-2000:]
    first, second = plan.stdout.splitlines()
    assert first.startswith(("OPTIMAL ", "FEASIBLE ")) and first.endswith(" s") and second.startswith("evaluated: ")
    assert second.endswith(" s per step") or second.startswith("evaluated: does not fit, "), second  # fits checked
    stream = run_python(blocks[1], server.port)
    assert stream.returncode == 0, stream.stderr[-2000:]
    lines = stream.stdout.splitlines()
    assert lines[-1].startswith("final: OPTIMAL") and len(lines) >= 2  # at least one progress line, then the result
    sweep = run_python(blocks[2], server.port)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    lines = sweep.stdout.splitlines()
    assert sorted(lines[:2]) == ["1/2 OPTIMAL", "2/2 OPTIMAL"] and [line.split()[:2] for line in lines[2:]] == [
        ["8", "OPTIMAL"], ["16", "OPTIMAL"]], sweep.stdout


def test_the_readme_service_snippet_runs(server):
    section = README.split("## Service", 1)[1].split("\n## ", 1)[0]
    (block,) = python_blocks(section, marked=False)
    run = run_python(block + "\nprint(result.status)\n", server.port)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() in ("OPTIMAL", "FEASIBLE")  # a plan within the docs' limit
    assert "docs/service.md" in section


def _grpcurl_body() -> tuple[str, str]:
    """(method, JSON body) of the doc's grpcurl Plan call."""
    match = re.search(r"grpcurl -plaintext -d @ 127\.0\.0\.1:50051 (\S+) <<EOF\n(.*?)\nEOF", DOC, flags=re.S)
    assert match, "the grpcurl Plan call is missing from docs/service.md"
    return match.group(1), match.group(2)


def _reflect(channel: grpc.Channel, request: reflection_pb2.ServerReflectionRequest):
    call = channel.stream_stream("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                 request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                                 response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
    (reply,) = list(call(iter([request]), timeout=10))
    return reply


def test_the_grpcurl_call_through_reflection(server):
    """What `grpcurl -d @ ... parplan.v1.PlannerService/Plan` does, with descriptors only from reflection."""
    method, body = _grpcurl_body()
    service, name = method.split("/")
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        listed = _reflect(channel, reflection_pb2.ServerReflectionRequest(list_services=""))
        assert service in {s.name for s in listed.list_services_response.service}  # `grpcurl ... list`
        files = _reflect(channel, reflection_pb2.ServerReflectionRequest(file_containing_symbol=service))
        pool = descriptor_pool.DescriptorPool()
        protos = [descriptor_pb2.FileDescriptorProto.FromString(raw)
                  for raw in files.file_descriptor_response.file_descriptor_proto]
        added: set[str] = set()
        while len(added) < len(protos):  # dependencies first
            for proto in protos:
                if proto.name not in added and all(d in added or d.startswith("google/protobuf/")
                                                   for d in proto.dependency):
                    for dep in proto.dependency:
                        if dep.startswith("google/protobuf/") and dep not in added:
                            dep_proto = descriptor_pb2.FileDescriptorProto()
                            descriptor_pool.Default().FindFileByName(dep).CopyToProto(dep_proto)
                            pool.Add(dep_proto)
                            added.add(dep)
                    pool.Add(proto)
                    added.add(proto.name)
        rpc = pool.FindServiceByName(service).methods_by_name[name]
        request_class = message_factory.GetMessageClass(rpc.input_type)
        response_class = message_factory.GetMessageClass(rpc.output_type)
        request = json_format.Parse(body, request_class())
        call = channel.unary_unary(f"/{service}/{name}", request_serializer=request_class.SerializeToString,
                                   response_deserializer=response_class.FromString)
        answer = json.loads(json_format.MessageToJson(call(request, timeout=120)))
    assert answer["status"] in ("PLAN_STATUS_OPTIMAL", "PLAN_STATUS_FEASIBLE") and len(answer["plans"]) == 3
    assert answer["admission"]["solverSlots"] == 4 and answer["admission"]["maxQueue"] == 64


@pytest.mark.skipif(shutil.which("grpcurl") is None, reason="grpcurl is not installed")
def test_the_grpcurl_call_with_grpcurl(server):
    method, body = _grpcurl_body()
    run = subprocess.run(["grpcurl", "-plaintext", "-d", "@", f"127.0.0.1:{server.port}", method], input=body,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["status"] == "PLAN_STATUS_OPTIMAL"


def test_the_client_retries_a_full_queue():
    """max_queue 0: a second call finds the one slot busy and is refused; PlannerClient's retry policy tries
    again with backoff and gets the slot once the first call is done."""
    from parplan import PlannerClient

    running = start(ServeOptions(port=0, max_concurrent=1, max_queue=0))
    target = f"127.0.0.1:{running.port}"
    seed = (REPO / "examples" / "seed-textbook-70b-8k.yaml").read_text()
    long = pb.PlanRequest(spec_text=(REPO / "examples" / "llama3-70b-64xh100.yaml").read_text(),
                          pareto_axis=pb.PARETO_AXIS_MEMORY, solver=pb.SolverParameters(workers=1, time_limit_s=30))
    try:
        with grpc.insecure_channel(target) as ch:
            first = pb_grpc.PlannerServiceStub(ch).Plan.future(long, timeout=60)
            t0 = time.monotonic()
            while running.servicer.active_calls != 1:
                assert time.monotonic() - t0 < 5
                time.sleep(0.01)
            with pytest.raises(grpc.RpcError) as err:  # a channel without the retry policy: refused
                pb_grpc.PlannerServiceStub(ch).Plan(pb.PlanRequest(spec_text=seed), timeout=10)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            threading.Timer(0.6, first.cancel).start()
            with PlannerClient(target, timeout_s=30) as client:
                assert client.plan(seed).status == "OPTIMAL"
    finally:
        running.drain(0)
