"""The Sweep RPC (server/sweep_rpc.py) on a real server on 127.0.0.1: points stream as they finish and match the
CLI's records; a bad sweep is INVALID_ARGUMENT naming the axis and the value; cancelling stops the sweep."""

from __future__ import annotations

import json
import time

import grpc
import pytest
import yaml

from parplan.library.sweep.points import load_sweep
from parplan.library.sweep.run import run_sweep
from parplan.server.app import ServeOptions, start
from parplan.server.sweep_rpc import SWEEP_WORKER_MEMORY_MIB
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc
from tests.conftest import budget_beside_this_process
from tests.sweep_cases import sweep_24

pytestmark = pytest.mark.usefixtures("fresh_heap")  # timed calls: the long suite's heap is not theirs to collect


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


def test_planner_client_sweep_gives_the_local_records(server, tmp_path):  # server: (running, stub), below
    """PlannerClient.sweep (client/grpc_client.py) over the Sweep RPC: each record as it lands, then the same
    records and summary as the CLI writes, and the server's version; a bad sweep is a ServiceError naming the axis."""
    import parplan
    from parplan.client.grpc_client import PlannerClient, ServiceError

    data = sweep_24(axes={"cluster.num_gpus": [8, 16]})
    seen = []
    with PlannerClient(f"127.0.0.1:{server[0].port}", timeout_s=120) as client:
        answer = client.sweep(data, jobs=2, on_point=lambda record, done, total: seen.append((record["index"], done,
                                                                                              total)))
        with pytest.raises(ServiceError) as err:
            client.sweep(sweep_24(axes={"cluster.num_gpus": [8, 12]}))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and "axes.cluster.num_gpus" in err.value.message
    run_sweep(load_sweep(data), str(tmp_path), jobs=2)
    assert answer.records == [json.loads(line) for line in (tmp_path / "points.jsonl").read_text().splitlines()]
    assert answer.summary == json.loads((tmp_path / "summary.json").read_text())
    assert sorted(i for i, _, _ in seen) == [0, 1] and [(d, t) for _, d, t in seen] == [(1, 2), (2, 2)]
    assert answer.failed == 0 and answer.parplan_version == parplan.__version__


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


def _alias_bomb() -> str:
    """Nine levels of nine aliases each ("billion laughs", CWE-776): a few hundred bytes, 10^8 nodes expanded."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_invalid_argument_within_a_second(stub):
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Sweep(pb.SweepRequest(sweep_text=_alias_bomb()), timeout=60))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "alias" in err.value.details()
    assert time.monotonic() - started < 1.0


def test_ray_address_from_a_request_is_invalid_argument(stub):
    data = sweep_24(axes={"cluster.num_gpus": [8, 16]})
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data), engine="ray",
                                        ray_address="10.0.0.1:6379"), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ray_address" in err.value.details()


def test_jobs_never_exceed_the_cgroup_cpus(stub, monkeypatch):
    import os

    from parplan.library.sweep import engines
    from parplan.server import sweep_rpc

    seen = []
    real = engines.run_local
    monkeypatch.setattr(engines, "run_local", lambda *a, jobs=None, **k: (seen.append(jobs), real(*a, jobs=jobs, **k))[1])
    data = sweep_24(axes={"cluster.num_gpus": [8, 16]})
    list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data), jobs=4096), timeout=120))
    assert seen and seen[0] <= len(os.sched_getaffinity(0))
    assert 1 <= sweep_rpc.cgroup_cpus() <= len(os.sched_getaffinity(0))


def test_forty_thousand_points_are_invalid_argument_fast(stub):
    data = sweep_24(axes={"cluster.num_gpus": list(range(8, 8 + 200)), "cluster.gpu": ["H100-SXM-80GB"] * 200})
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data)), timeout=2))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("axes") and "40000" in err.value.details()
    assert time.monotonic() - started < 1.0


@pytest.fixture(scope="module")
def server():
    running = start(ServeOptions(port=0, max_concurrent=1))
    with grpc.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield running, pb_grpc.PlannerServiceStub(channel)
    running.drain(0)


def test_a_short_deadline_ends_the_sweep_and_frees_its_slot(server, monkeypatch):
    """4,000 points (inside the cap) whose validation alone takes seconds, against a 1 s deadline: the call ends
    DEADLINE_EXCEEDED and the server has finished it (its log line written, no slot held) within the deadline
    + 1 s: the points are validated on the slot with the deadline checked between them."""
    import threading

    from parplan.server import service

    running, stub = server
    budget_beside_this_process(monkeypatch, 2 * SWEEP_WORKER_MEMORY_MIB)  # room for its one worker (jobs=1)
    ended, lines = threading.Event(), []
    real_log = service.log_event

    def log_event(event, **fields):
        real_log(event, **fields)
        if event == "rpc" and fields.get("method") == "Sweep":
            lines.append(fields)
            ended.set()

    # one small sweep first: the server's first Sweep imports and builds what every later one reuses (seconds
    # of work no deadline can interrupt), which is not what this test times
    list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(sweep_24(axes={"cluster.num_gpus": [8]})), jobs=1),
                    timeout=120))
    monkeypatch.setattr(service, "log_event", log_event)
    data = sweep_24(axes={"cluster.num_gpus": [8, 16, 32, 64] * 25, "cluster.gpu": ["H100-SXM-80GB"] * 40})
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data), jobs=1), timeout=1.0))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert ended.wait(timeout=10)
    assert time.monotonic() - started < 2.0
    # the server's own line: gRPC ends a call past its deadline with a cancel, which the server may see first
    assert lines[0]["code"] in ("DEADLINE_EXCEEDED", "CANCELLED") and running.servicer.active_calls == 0


@pytest.mark.parametrize("cpu_max, cap", [("150000 100000\n", 2), ("50000 100000\n", 1), ("max 100000\n", None)])
def test_cgroup_cpus_reads_the_quota(tmp_path, cpu_max, cap):
    import os

    from parplan.server.sweep_rpc import cgroup_cpus

    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    affinity = len(os.sched_getaffinity(0))
    assert cgroup_cpus(str(path)) == (affinity if cap is None else min(cap, affinity))


def test_alias_bomb_is_refused_by_the_shared_yaml_loader():
    from parplan.library.spec_io import SpecError, parse_yaml

    with pytest.raises(SpecError, match="alias"):
        parse_yaml(_alias_bomb(), "spec.yaml")
    assert parse_yaml("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}


@pytest.fixture(autouse=True)
def room_beside_the_test_process(monkeypatch) -> None:
    """The in-process server shares the test process, whose RSS grows with every test before (not a server's):
    its budget gets room for a sweep's workers beside it (sweep_rpc.sweep_jobs counts them against it)."""
    budget_beside_this_process(monkeypatch, 2048)


@pytest.mark.parametrize("requested,cpus,rss_mib,held_mib,expected", [
    (16, 8, 200, 0, 2),  # (1536 - 200) // 512 = 2 workers' budgets fit
    (16, 1, 200, 0, 1),  # the cgroup's CPUs
    (0, 8, 200, 0, 2),  # the default: one per CPU, within the budget
    (1, 8, 200, 0, 1),
    (16, 8, 200, 400, 1),  # what the calls in flight hold
    (16, 8, 1100, 0, None),  # no room for one worker: RESOURCE_EXHAUSTED
])
def test_sweep_workers_fit_the_servers_memory_budget(monkeypatch, requested, cpus, rss_mib, held_mib, expected):
    """A Sweep's worker processes are counted in the server's budget (issue 36, finding 4): at most as many
    SWEEP_WORKER_MEMORY_MIB budgets as the default 1536 MiB has room for beside the RSS and the ledger's holds."""
    from google.rpc import code_pb2

    from parplan.server import sweep_rpc
    from parplan.server.admission import Abort
    from parplan.solver import deadline

    monkeypatch.setattr(sweep_rpc, "cgroup_cpus", lambda: cpus)
    monkeypatch.setattr(deadline, "rss_bytes", lambda: rss_mib * deadline.MIB)
    monkeypatch.setattr(deadline, "_process_default_mib", 1536)
    assert sweep_rpc.SWEEP_WORKER_MEMORY_MIB == 512
    with deadline.LEDGER.hold_outside(held_mib * deadline.MIB):
        if expected is None:
            with pytest.raises(Abort) as err:
                sweep_rpc.sweep_jobs(requested, 1)
            assert err.value.status.code == code_pb2.RESOURCE_EXHAUSTED
        else:
            assert sweep_rpc.sweep_jobs(requested, 1) == expected


def test_sweep_workers_solve_under_their_share_and_hold_it(stub, monkeypatch):
    """The local engine's workers get SWEEP_WORKER_MEMORY_MIB as their process budget, and the server's ledger
    holds jobs x that while the sweep runs (other calls see less room), then lets it go."""
    from parplan.library.sweep import engines
    from parplan.solver import deadline


    seen = []
    real = engines.run_local

    def spy(*a, jobs=None, worker_memory_budget_mib=None, **k):
        seen.append((jobs, worker_memory_budget_mib, deadline.LEDGER.outside_bytes()))
        return real(*a, jobs=jobs, worker_memory_budget_mib=worker_memory_budget_mib, **k)

    monkeypatch.setattr(engines, "run_local", spy)
    data = sweep_24(axes={"cluster.num_gpus": [8, 16]})
    replies = list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data), jobs=2), timeout=120))
    assert replies[-1].summary.points == 2 and replies[-1].summary.failed == 0
    jobs, budget_mib, held = seen[0]
    assert budget_mib == 512 and held == jobs * 512 * deadline.MIB
    assert deadline.LEDGER.outside_bytes() == 0


def test_a_sweep_worker_takes_its_budget():
    from parplan.library.sweep import engines
    from parplan.solver import deadline

    before = deadline.default_memory_budget_mib()
    try:
        engines._init_worker({}, {}, 384)
        assert deadline.default_memory_budget_mib() == 384
    finally:
        deadline.set_default_memory_budget(before)
        import signal

        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_the_engine_is_the_servers(stub, monkeypatch):
    """The server's engine (serve --sweep-engine, default local): a request naming another is INVALID_ARGUMENT."""
    data = sweep_24(axes={"cluster.num_gpus": [8]})
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data), engine="ray"), timeout=30))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "engine" in err.value.details() and "--sweep-engine" in err.value.details()
    replies = list(stub.Sweep(pb.SweepRequest(sweep_text=yaml.safe_dump(data), engine="local", jobs=1), timeout=120))
    assert replies[-1].summary.points == 1


def test_an_unknown_server_engine_is_a_config_error():
    from parplan.server.app import ServeConfigError

    with pytest.raises(ServeConfigError, match="--sweep-engine"):
        start(ServeOptions(port=0, sweep_engine="dask"))
