"""server/admission.py: a slot is held for a ``with`` block and released on every path out of it (a raise right
after the slot is had, a dead call's ``send_initial_metadata``, cancels at random points through a real server)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import grpc
import pytest

from parplan.server.admission import Admission
from parplan.server.app import ServeOptions, start
from parplan.server.service import PlannerServicer
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "examples" / "seed-textbook-70b-8k.yaml"
LLAMA = REPO / "examples" / "llama3-70b-64xh100.yaml"


def test_a_raise_right_after_acquire_releases_the_slot():
    admission, never = Admission(slots=1, max_queue=0), threading.Event()
    with pytest.raises(RuntimeError):
        with admission.slot(never, never, None):
            assert admission.active == 1
            raise RuntimeError("right after the slot is had")
    assert admission.active == 0
    with admission.slot(never, never, None) as (waited_s, ahead):  # the slot is free again
        assert (ahead, admission.active) == (0, 1)


class _DeadCall:
    """A servicer context whose call has just ended: ``send_initial_metadata`` raises, as grpcio's does."""

    def __init__(self):
        self.aborted = None

    def invocation_metadata(self):
        return ()

    def add_callback(self, callback):
        return True  # registered; the call ends inside the handler

    def time_remaining(self):
        return 30.0

    def send_initial_metadata(self, metadata):
        raise ValueError("the call has already ended")

    def is_active(self):
        return False

    def peer(self):
        return "ipv4:127.0.0.1:1"

    def abort_with_status(self, status):
        self.aborted = status
        raise grpc.RpcError()


@pytest.mark.parametrize("method, request_", [
    ("Plan", pb.PlanRequest(spec_text=SEED.read_text())),
    ("Evaluate", pb.EvaluateRequest(spec_text=(REPO / "examples" / "llama3-70b-64xh100-evaluate.yaml").read_text())),
    ("Pareto", pb.ParetoRequest(spec_text=SEED.read_text(), axis=pb.PARETO_AXIS_MEMORY)),
    ("PlanStream", pb.PlanStreamRequest(spec_text=SEED.read_text())),
])
def test_a_dead_call_after_admission_releases_its_slot(method, request_):
    servicer = PlannerServicer(max_concurrent=1, max_queue=0)
    context = _DeadCall()
    with pytest.raises(grpc.RpcError):
        result = getattr(servicer, method)(request_, context)
        if method == "PlanStream":
            list(result)
    assert servicer.admission.active == 0 and servicer.admission.queued == 0
    assert context.aborted is not None and context.aborted.code != grpc.StatusCode.INTERNAL


def test_hundreds_of_calls_cancelled_at_random_points_leave_every_slot_free(caplog):
    """300 Plan calls on a one-slot server, each cancelled at a random point: before it is sent, right after,
    while it waits in the queue or mid-solve; then no slot is held, no call waits, and a fresh Plan is served."""
    rng = random.Random(36)
    running = start(ServeOptions(port=0, max_concurrent=1, max_queue=8))
    long_ = pb.PlanRequest(spec_text=LLAMA.read_text(), pareto_axis=pb.PARETO_AXIS_MEMORY,
                           solver=pb.SolverParameters(workers=1, time_limit_s=30))
    short = pb.PlanRequest(spec_text=SEED.read_text())
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.PlannerServiceStub(ch)
            for _ in range(30):
                futures = []
                for _ in range(10):
                    future = stub.Plan.future(rng.choice((long_, short)), timeout=30)
                    point = rng.choice(("now", "soon", "later"))
                    if point == "now":
                        future.cancel()
                    else:
                        futures.append((future, time.monotonic() + rng.uniform(0, 0.01 if point == "soon" else 0.3)))
                for future, at in futures:
                    time.sleep(max(0.0, at - time.monotonic()))
                    future.cancel()
            admission = running.servicer.admission
            t0 = time.monotonic()
            while admission.active or admission.queued or running.servicer.calls_in_handler:
                assert time.monotonic() - t0 < 30, (f"{admission.active} slots held, {admission.queued} waiting, "
                                                    f"{running.servicer.calls_in_handler} in a handler")
                time.sleep(0.05)
        with grpc.insecure_channel(f"127.0.0.1:{running.port}", options=[("grpc.use_local_subchannel_pool", 1)]) as fresh:
            reply = pb_grpc.PlannerServiceStub(fresh).Plan(short, timeout=30)
            assert reply.status == pb.PLAN_STATUS_OPTIMAL
            assert admission.active == 0
    finally:
        running.drain(0)
    assert "internal_error" not in caplog.text
