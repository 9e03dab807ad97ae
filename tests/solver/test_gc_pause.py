"""solver/gc_pause.py: the cyclic collector paused for a planning call and resumed after it, only if it was on;
nested and overlapping pauses share one; a pause that outlasts MAX_PAUSE_S collects once when the next call starts;
the collector is back on after an optimize call."""

from __future__ import annotations

import gc
import threading

from parplan.solver import gc_pause
from parplan.solver.gc_pause import gc_paused


def test_a_pause_resumes_the_collector_only_if_it_was_on():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause holds
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()


def test_overlapping_pauses_of_two_threads_share_one():
    entered, release = threading.Event(), threading.Event()

    def other():
        with gc_paused():
            entered.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    entered.wait(10)
    with gc_paused():
        pass
    assert not gc.isenabled()  # the other thread's pause still holds
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_a_long_shared_pause_collects_when_the_next_call_starts(monkeypatch):
    collected = []
    monkeypatch.setattr(gc_pause, "MAX_PAUSE_S", 0.0)
    monkeypatch.setattr(gc_pause.gc, "collect", lambda *a: collected.append(a) or 0)
    with gc_paused():
        assert not collected  # the first pause does not collect
        with gc_paused():
            assert len(collected) == 1
    assert gc.isenabled()


def test_the_collector_is_on_after_an_optimize_call():
    from benchmarks.solver_speed import SCENARIOS
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.planner import optimize

    result = optimize(validate_spec(dict(SCENARIOS)["8B / 8 H100, 8K"]))
    assert result.plans and gc.isenabled()
