"""The server's drain (server/app.py ``RunningServer.drain``, server/service.py ``PlannerServicer.handling`` and
``time_up``; issue 36 finding 6): every call counts from its handler's first line, new and queued calls get
UNAVAILABLE, an in-flight solve answers with its best plan so far before the grace ends, and the server (or the
``solver-cli serve`` process) stops within the grace + 1 s, even when a handler ignores its time-up.

Long solves, each with a plan found early and running far past the 5 s grace on one CP-SAT worker (solver speed-ups
brought the earlier ones, llama3-70b's memory frontier and DeepSeek-V3's top 100, under the grace): DeepSeek-V3's
memory frontier takes ~33 s, its first plan at ~1 s (a timed-up call answers with it and the frontier so far);
DeepSeek-V3's research space (``framework: any``) with ``top_k=100`` streams its plans over ~50 s, the first at
~1.5 s. A grace of a few seconds cuts both.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

import grpc
import pytest
import yaml

from parplan.server import app
from parplan.server.app import EXIT_SLACK_S, ServeOptions, start
from parplan.v1 import planner_pb2 as pb
from parplan.v1 import planner_pb2_grpc as pb_grpc
from tests.conftest import budget_beside_this_process, load_stretch
from tests.server.test_service import LLAMA, LONG_SPEC, REPO, SEED, _serve_subprocess, serve_process, wait_until
from tests.sweep_cases import sweep_24

pytestmark = pytest.mark.usefixtures("fresh_heap")  # timed calls: the long suite's heap is not theirs to collect

FRONTIER = pb.PlanRequest(spec_text=LONG_SPEC.read_text(), pareto_axis=pb.PARETO_AXIS_MEMORY,
                          solver=pb.SolverParameters(workers=1, time_limit_s=120))
TOP_100 = pb.PlanStreamRequest(spec_text=yaml.safe_dump({**yaml.safe_load(LONG_SPEC.read_text()), "framework": "any"}),
                               top_k=100, solver=pb.SolverParameters(workers=1, time_limit_s=120))
PLAN_METHOD = "/parplan.v1.PlannerService/Plan"


class _Stalled:
    """A Plan call whose request never comes (headers sent, no message): a call still reading its request."""

    def __init__(self, channel: grpc.Channel):
        self._release = threading.Event()

        def never():
            self._release.wait()
            return
            yield  # a generator that sends nothing

        call = channel.stream_unary(PLAN_METHOD, request_serializer=bytes,
                                    response_deserializer=pb.PlanResponse.FromString)
        self.future = call.future(never(), timeout=120)

    def close(self) -> None:
        self._release.set()
        self.future.cancel()


class _Stream:
    """A PlanStream consumed on a thread: its messages, its error and when it ended."""

    def __init__(self, stub, request):
        self.messages, self.error, self.ended_at = [], None, None
        self.call = stub.PlanStream(request, timeout=120)
        self.done = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for message in self.call:
                self.messages.append(message)
        except grpc.RpcError as err:
            self.error = err
        self.ended_at = time.perf_counter()
        self.done.set()


def test_drain_answers_every_inflight_solve_refuses_the_rest_and_stops_by_the_grace(monkeypatch):
    # under load (conftest.load_stretch) the grace and the answer margin are stretched alike: the time-up solves get
    # the CPU time to send their best plans that a quiet machine gives them within the margin
    stretch = load_stretch()
    grace_s = 5.0 * stretch
    monkeypatch.setattr(app, "DRAIN_ANSWER_MARGIN_S", app.DRAIN_ANSWER_MARGIN_S * stretch)
    running = start(ServeOptions(port=0, max_concurrent=2, max_queue=4, idle_timeout_s=120))
    servicer = running.servicer
    stalled = None
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.PlannerServiceStub(ch)
            # the solves are timed up grace - 1 s after the drain begins: by then each has a plan to give
            solving = stub.Plan.future(FRONTIER, timeout=120)  # ~33 s of solving: past the grace
            wait_until(lambda: servicer.active_calls == 1, timeout_s=30)
            stream = _Stream(stub, TOP_100)  # streaming, ~50 s
            wait_until(lambda: servicer.active_calls == 2, timeout_s=30)
            queued = stub.Plan.future(pb.PlanRequest(spec_text=SEED.read_text()), timeout=120)
            wait_until(lambda: servicer.admission.queued == 1, timeout_s=30)
            stalled = _Stalled(ch)
            # every call counts, the one still reading its request included
            wait_until(lambda: servicer.calls_in_handler == 4, timeout_s=10)
            assert servicer.calls.calls_past_request == 3
            wait_until(lambda: stream.messages, timeout_s=60)  # the solves are under way: a plan to give

            t0 = time.perf_counter()
            stopped = []
            drainer = threading.Thread(target=lambda: stopped.append((running.drain(grace_s), time.perf_counter())))
            drainer.start()
            wait_until(servicer.draining.is_set, timeout_s=1)
            with pytest.raises(grpc.RpcError) as new:
                stub.Plan(pb.PlanRequest(spec_text=SEED.read_text()), timeout=10)
            assert new.value.code() == grpc.StatusCode.UNAVAILABLE

            with pytest.raises(grpc.RpcError) as refused:  # no slot freed before the time-up: UNAVAILABLE then
                queued.result(timeout=grace_s + 2)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert time.perf_counter() - t0 < grace_s

            reply = solving.result(timeout=grace_s + 2)  # an answer, not UNAVAILABLE: its best plan so far
            answered_s = time.perf_counter() - t0
            assert reply.plans, "the timed-up solve answers with the plans it has"
            assert reply.status in (pb.PLAN_STATUS_OPTIMAL, pb.PLAN_STATUS_FEASIBLE)
            assert answered_s < grace_s, f"answered {answered_s:.2f} s into a {grace_s} s grace"

            assert stream.done.wait(grace_s + 2)
            assert stream.error is None, stream.error
            assert stream.messages[-1].HasField("result") and stream.messages[-1].result.plans
            assert stream.ended_at - t0 < grace_s

            with pytest.raises(grpc.RpcError) as reading:
                stalled.future.result(timeout=grace_s + 2)
            assert reading.value.code() == grpc.StatusCode.UNAVAILABLE

            drainer.join(grace_s + 2)
            assert stopped, "the drain did not return"
            unfinished, at = stopped[0]
            assert at - t0 <= grace_s + 1.0
            assert unfinished == 0 and servicer.calls_in_handler == 0
    finally:
        if stalled is not None:
            stalled.close()
        running.drain(0)


def test_drain_serves_a_queued_call_whose_slot_frees_before_the_time_up():
    """A call already queued when the drain begins keeps its place: a slot freed within the grace serves it, and
    the drain returns as soon as every call is done (not at the grace)."""
    grace_s = 30.0
    running = start(ServeOptions(port=0, max_concurrent=1))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.PlannerServiceStub(ch)
            first = stub.Plan.future(pb.PlanRequest(spec_text=LLAMA.read_text(),  # ~1.5 s
                                                    solver=pb.SolverParameters(workers=1)), timeout=60)
            wait_until(lambda: running.servicer.active_calls == 1, timeout_s=30)
            queued = stub.Plan.future(pb.PlanRequest(spec_text=SEED.read_text()), timeout=60)
            wait_until(lambda: running.servicer.admission.queued == 1, timeout_s=30)
            t0 = time.perf_counter()
            assert running.drain(grace_s) == 0
            assert time.perf_counter() - t0 < grace_s - 1.0, "the drain waited for the time-up"
            assert first.result(timeout=1).status == pb.PLAN_STATUS_OPTIMAL
            assert queued.result(timeout=1).status == pb.PLAN_STATUS_OPTIMAL
    finally:
        running.drain(0)


def test_drain_returns_by_the_grace_when_a_handler_ignores_its_time_up(monkeypatch):
    """An Evaluate whose work never looks at its cancel event: the drain still ends by the grace + its slack and
    says how many handlers did not return (``serve`` then exits the process regardless)."""
    import parplan.server.service as service

    release = threading.Event()
    monkeypatch.setattr(service, "evaluate_spec", lambda spec, **kwargs: release.wait())  # its signature
    grace_s = 1.0
    running = start(ServeOptions(port=0, max_concurrent=1))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            stub = pb_grpc.PlannerServiceStub(ch)
            stuck = stub.Evaluate.future(pb.EvaluateRequest(spec_text=(REPO / "examples" /
                                                                       "llama3-70b-64xh100-evaluate.yaml").read_text()),
                                         timeout=60)
            wait_until(lambda: running.servicer.active_calls == 1, timeout_s=30)
            t0 = time.perf_counter()
            unfinished = running.drain(grace_s)
            assert time.perf_counter() - t0 <= grace_s + 1.0
            assert unfinished == 1
            with pytest.raises(grpc.RpcError) as cut:
                stuck.result(timeout=5)
            assert cut.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        release.set()
        running.drain(0)


# ----------------------------------------------------------------------------- the process: real SIGTERM


def test_sigterm_with_calls_in_every_state_exits_within_the_grace():
    grace_s = 4
    proc, port, lines = _serve_subprocess("--max-concurrent", "2", "--max-queue", "4", "--grace-period",
                                          str(grace_s), "--health-port", "0", "--idle-timeout", "120")
    stalled = None
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.PlannerServiceStub(ch)
            solving = stub.Plan.future(FRONTIER, timeout=120)
            stream = _Stream(stub, TOP_100)
            wait_until(lambda: stream.messages, timeout_s=60)  # its first plan: both calls (FIFO) have their slots
            queued = stub.Plan.future(pb.PlanRequest(spec_text=SEED.read_text()), timeout=120)
            stalled = _Stalled(ch)
            # the server's queue and handlers are out of this process's sight: a moment for the last two to arrive
            time.sleep(1.0)
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            with pytest.raises(grpc.RpcError) as refused:
                queued.result(timeout=grace_s + 2)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            reply = solving.result(timeout=grace_s + 2)
            assert reply.plans and time.perf_counter() - t0 < grace_s
            assert stream.done.wait(grace_s + 2) and stream.error is None
            assert stream.messages[-1].HasField("result")
            with pytest.raises(grpc.RpcError) as reading:
                stalled.future.result(timeout=grace_s + 2)
            assert reading.value.code() == grpc.StatusCode.UNAVAILABLE
        assert proc.wait(timeout=grace_s + 5) == 0
        exit_s = time.perf_counter() - t0
        # the drain ends by the grace + EXIT_SLACK_S; the interpreter's exit after it takes longer under load
        teardown_s = 0.5 * load_stretch()
        assert exit_s <= grace_s + EXIT_SLACK_S + teardown_s, f"exited {exit_s:.2f} s after SIGTERM, grace {grace_s} s"
        events = [entry.get("event") for entry in lines]
        assert "draining" in events and "time_up" in events and "stopped" in events
        draining = next(entry for entry in lines if entry.get("event") == "draining")
        assert draining["calls"] == 4 and draining["queued_calls"] == 1  # the stalled call counted
    finally:
        if stalled is not None:
            stalled.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_exits_by_the_grace_when_a_handler_never_returns(tmp_path):
    """A handler stuck past every cancel (here Evaluate's work patched to block) would keep the interpreter alive
    at exit (its worker thread is joined): the process exits by the grace + EXIT_SLACK_S anyway."""
    grace_s = 1.0
    script = (
        "import sys, threading, parplan.server.service as service\n"
        "def stuck(spec, **kwargs):\n"
        "    print('{\"event\": \"stuck\"}', file=sys.stderr, flush=True)\n"
        "    threading.Event().wait()\n"
        "service.evaluate_spec = stuck\n"
        "from parplan.server.app import ServeOptions, serve\n"
        f"serve(ServeOptions(port=0, health_port=0, max_concurrent=1, grace_s={grace_s}))\n")
    proc, port, lines = serve_process([sys.executable, "-c", script])
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stuck = pb_grpc.PlannerServiceStub(ch).Evaluate.future(pb.EvaluateRequest(
                spec_text=(REPO / "examples" / "llama3-70b-64xh100-evaluate.yaml").read_text()), timeout=60)
            wait_until(lambda: any(e.get("event") == "stuck" for e in lines), timeout_s=60, step_s=0.05)
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=grace_s + 10) == 0
            exit_s = time.perf_counter() - t0
        assert exit_s <= grace_s + EXIT_SLACK_S + 0.5, f"exited {exit_s:.2f} s after SIGTERM"
        assert any(e.get("event") == "forced_exit" for e in lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_drain_ends_an_inflight_sweep_unavailable_after_the_points_it_sent(monkeypatch):
    """A Sweep (a stream of points) is timed up like a solve: it stops between or inside points and ends
    UNAVAILABLE (retryable) after the points already sent, before the grace ends."""
    budget_beside_this_process(monkeypatch, 1024)  # room for the sweep's one worker
    grace_s = 2.0
    running = start(ServeOptions(port=0, max_concurrent=1))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{running.port}") as ch:
            # 384 distinct points: more than a warm worker solves in the grace (the 24 took under the 1 s before the
            # time-up, and a repeated point is solved once)
            many = sweep_24(axes={"cluster.gpu": ["H100-SXM-80GB", "A100-SXM-80GB"], "cluster.num_gpus": [8, 16, 32],
                                  "training.seq_len": [2048, 4096], "training.global_batch_size": [32 * k for k in range(1, 33)]})
            call = pb_grpc.PlannerServiceStub(ch).Sweep(pb.SweepRequest(
                sweep_text=yaml.safe_dump(many, sort_keys=False), jobs=1), timeout=120)
            assert next(call).WhichOneof("event") == "point"
            t0 = time.perf_counter()
            stopped = []
            drainer = threading.Thread(target=lambda: stopped.append((running.drain(grace_s), time.perf_counter())))
            drainer.start()
            with pytest.raises(grpc.RpcError) as ended:
                for reply in call:
                    assert reply.WhichOneof("event") == "point", "the sweep cannot finish its 384 points in the grace"
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert time.perf_counter() - t0 < grace_s
            drainer.join(grace_s + 2)
            unfinished, at = stopped[0]
            assert unfinished == 0 and at - t0 <= grace_s + 1.0
    finally:
        running.drain(0)
