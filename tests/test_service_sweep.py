"""The Sweep RPC (server/sweep_rpc.py) on a real server on 127.0.0.1: points stream as they finish and match the
CLI's records; a bad sweep is INVALID_ARGUMENT naming the axis and the value; cancelling stops the sweep."""

from __future__ import annotations

import json
import time

import grpc
import pytest
import yaml

from parplan.client.sweep.points import load_sweep
from parplan.client.sweep.run import run_sweep
from parplan.server.app import ServeOptions, start
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc
from tests.sweep_cases import sweep_24


@pytest.fixture(scope="module")
def stub():
    running = start(ServeOptions(port=0, max_concurrent=2))
    with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield pb_grpc.PlannerServiceStub(channel)
    running.drain(0)


def test_sweep_streams_the_local_records(stub, tmp_path):
    data = sweep_24(axes={"cluster.gpu": ["H100-SXM-80GB", "A100-SXM-80GB"], "cluster.num_gpus": [8, 16, 32]})
    replies = list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data, sort_keys=False), jobs=2), timeout=120))
    points, summary = replies[:-1], replies[-1]
    assert [r.WhichOneof("event") for r in replies] == ["point"] * 6 + ["summary"]
    assert sorted(r.point.index for r in points) == list(range(6))
    assert [r.point.done for r in points] == list(range(1, 7)) and {r.point.total for r in points} == {6}
    run_sweep(load_sweep(data), str(tmp_path), jobs=2)
    assert summary.summary.records_jsonl == (tmp_path / "points.jsonl").read_text()
    assert summary.summary.points == 6 and summary.summary.failed == 0
    first = json.loads(points[0].point.record_json)
    assert first["status"] == points[0].point.status == "OPTIMAL"
    assert dict(points[0].point.axes) == {k: (float(v) if isinstance(v, int) else v) for k, v in first["axes"].items()}


def test_bad_sweep_is_invalid_argument(stub):
    data = sweep_24(axes={"cluster.num_gpus": [8, 12]})
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data)), timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "axes.cluster.num_gpus" in err.value.details() and "value 12" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(sweep_24(base="spec.yaml"))), timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "inline" in err.value.details()


def test_cancel_stops_the_sweep(stub):
    call = stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(sweep_24(), sort_keys=False), jobs=1), timeout=120)
    first = next(call)
    assert first.WhichOneof("event") == "point"
    call.cancel()
    with pytest.raises(grpc.RpcError) as err:
        list(call)
    assert err.value.code() == grpc.StatusCode.CANCELLED
    # the slot comes back: the next call is served, not RESOURCE_EXHAUSTED
    deadline = time.time() + 30
    while True:
        try:
            replies = list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(
                sweep_24(axes={"cluster.num_gpus": [8]}), sort_keys=False), jobs=1), timeout=60))
            break
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.time() < deadline
            time.sleep(0.5)
    assert replies[-1].summary.points == 1


def _violation_field(err: grpc.RpcError) -> str:
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    status = rpc_status.from_call(err)
    bad = error_details_pb2.BadRequest()
    status.details[0].Unpack(bad)
    return bad.field_violations[0].field


@pytest.mark.parametrize("where", ["base", "axis", "point"])
def test_sweep_never_opens_a_file(stub, tmp_path, monkeypatch, where):
    """A sweep over gRPC is refused where it names a config.json path, in its base, a model axis or a point: the
    server reads no files (as for the Plan RPC), and says where the path stands."""
    secret = tmp_path / "config.json"
    secret.write_text('{"model_type": "llama", "secret": "do-not-echo"}')
    data = sweep_24(axes={"cluster.num_gpus": [8]})
    if where == "base":
        data["base"]["model"] = {"hf_config": str(secret)}
    elif where == "axis":
        data["axes"]["model"] = [str(secret)]
    else:
        data["points"] = [{"model": {"hf_config": str(secret)}}]
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data)), timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reads no files" in err.value.details() and "do-not-echo" not in err.value.details()
    assert _violation_field(err.value).startswith({"base": "base.model.hf_config", "axis": "axes.model",
                                                   "point": "points[0].model"}[where])
