"""solver/deadline.py: one memory budget for the whole process, shared by the calls in flight (issue 36, finding
7). A structure another call in flight was told fits counts against this call until that call ends; a process
already over the budget is every call's time up; four calls on 10**6-layer specs at once stay within a budget
each of them alone would have met (the base code let four such frontier calls take 474 MiB of a 256 MiB budget,
benchmarks/abuse.py's budget row measures it against a server)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from parplan.solver import deadline
from parplan.solver.deadline import LEDGER, MIB, MemoryBudget, TimeUp, budget, call_limits, check, past


@pytest.fixture
def rss_at(monkeypatch):
    """Set the process's RSS the budget sees (and forget past()'s last read)."""
    value = [100 * MIB]
    monkeypatch.setattr(deadline, "rss_bytes", lambda: value[0])
    monkeypatch.setattr(deadline, "_rss_read", [-1.0, 0])

    def set_mib(mib: int) -> None:
        value[0] = mib * MIB
        deadline._rss_read[0] = -1.0

    return set_mib


def _in_another_call(body, limit_mib: int = 512):
    """Run ``body()`` inside its own call (its own thread and call_limits); returns what it returned."""
    out: list = []
    with_call = threading.Event()
    finish = threading.Event()

    def run():
        with call_limits(None, None, limit_mib):
            out.append(body())
            with_call.set()
            finish.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    assert with_call.wait(10)
    return out[0], finish, thread


def test_what_another_call_was_last_told_fits_counts_until_its_next_claim_or_end(rss_at):
    rss_at(100)
    claimed, finish, other = _in_another_call(lambda: budget().fits(300 * MIB))
    assert claimed and LEDGER.held_bytes() == 300 * MIB
    with call_limits(None, None, 512):
        assert not budget().fits(200 * MIB)  # 100 + 300 (the other call's) + 200 > 512
        assert budget().fits(100 * MIB)  # 100 + 300 + 100 <= 512, and now this call holds 100
        finish.set()
        other.join()
        assert LEDGER.held_bytes() == 100 * MIB
        assert budget().fits(300 * MIB)  # its own claims are in the RSS already: 100 + 300 <= 512
        assert LEDGER.held_bytes() == 300 * MIB  # its latest claim replaced the last
    assert LEDGER.held_bytes() == 0 and LEDGER.calls_in_flight() == 0


def test_a_calls_claims_do_not_pile_up(rss_at):
    """A call that was told a hundred times that 200 MiB fit (tables built and dropped one after another) holds
    one claim, not 20 GB: a call beside it still gets the room the process has."""
    rss_at(100)

    def many():
        return all(budget().fits(200 * MIB) for _ in range(100))

    claimed, finish, other = _in_another_call(many)
    try:
        assert claimed and LEDGER.held_bytes() == 200 * MIB
        with call_limits(None, None, 512):
            assert budget().fits(200 * MIB)  # 100 + 200 + 200 <= 512
    finally:
        finish.set()
        other.join()


def test_a_lone_call_decides_on_the_rss_alone(rss_at):
    """The CLI and the library (one call in the process) answer as before: their own claims never count."""
    rss_at(100)
    with call_limits(None, None, 512):
        for _ in range(5):
            assert budget().fits(400 * MIB)
        assert not budget().fits(413 * MIB)
    assert MemoryBudget.of_mib(512).fits(400 * MIB)  # outside a call: nothing is claimed


def test_a_nested_call_claims_for_its_outer_call(rss_at):
    rss_at(100)
    with call_limits(None, None, 512):
        with call_limits(None, None, 512):
            assert budget().fits(300 * MIB)
            assert LEDGER.calls_in_flight() == 1
        assert budget().fits(300 * MIB)  # the inner claim was this call's own
        assert LEDGER.held_bytes() == 300 * MIB
    assert LEDGER.held_bytes() == 0


def test_a_process_over_its_budget_is_every_calls_time_up(rss_at):
    rss_at(100)
    with call_limits(None, None, 256):
        assert not past(None)
        rss_at(256 - 1)  # within the limit, not within the room left for one call's unchecked bytes
        assert past(None)
        rss_at(200)
        check()
        rss_at(300)
        with pytest.raises(TimeUp):
            check()
    assert not past(None)  # outside a call there is no budget to be over


FOUR_CALLS = r"""
import json, sys, threading
from parplan import optimize
from parplan.solver.cpsat import SolverControls
import parplan.solver.planner
budget_mib, calls = int(sys.argv[1]), int(sys.argv[2])
def spec(i):
    return dict(model=dict(name=f"deep{i}", num_layers=10**6, hidden_size=256, ffn_hidden_size=1024,
                           num_attention_heads=4, num_kv_heads=4, vocab_size=32000),
                training=dict(seq_len=256, global_batch_size=4194304 - i),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=1048576))
statuses = []
def one(i):
    r = optimize(spec(i), pareto="memory", controls=SolverControls(time_limit_s=6, workers=1,
                                                                   memory_budget_mib=budget_mib))
    statuses.append(r.status)
threads = [threading.Thread(target=one, args=(i,)) for i in range(calls)]
[t.start() for t in threads]
[t.join() for t in threads]
# VmHWM: this image's own peak (ru_maxrss keeps the forking parent's peak across a vfork + exec)
peak_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"statuses": statuses, "peak_rss_mib": peak_kib / 1024}))
"""


def test_four_deep_frontier_calls_share_one_budget():
    """Four memory-frontier calls on 10**6-layer specs in one process under a 320 MiB budget: the kernel's peak RSS
    of the process (VmHWM) stays within it (each call alone peaks near 240 MiB, interpreter and imports included)."""
    budget_mib = 320
    out = subprocess.run([sys.executable, "-c", FOUR_CALLS, str(budget_mib), "4"], capture_output=True, text=True,
                         timeout=120, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(res["statuses"]) == 4 and set(res["statuses"]) <= {"OPTIMAL", "FEASIBLE", "UNKNOWN"}
    assert res["peak_rss_mib"] <= budget_mib, res


def test_a_thread_outside_the_call_sees_it_over_budget(rss_at):
    """The CP-SAT stopper runs on its own thread: over_budget(limits) answers for the call it was given, so a
    solve in C++ stops like every Python loop once the process is past the budget."""
    from parplan.solver.deadline import over_budget

    rss_at(100)
    with call_limits(None, None, 256) as limits:
        seen: list[bool] = []
        thread = threading.Thread(target=lambda: seen.append(over_budget(limits)))
        thread.start()
        thread.join()
        assert seen == [False]
        rss_at(300)
        thread = threading.Thread(target=lambda: seen.append(over_budget(limits)))
        thread.start()
        thread.join()
        assert seen == [False, True]
