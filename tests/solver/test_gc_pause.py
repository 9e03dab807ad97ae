"""solver/gc_pause.py: the cyclic collector paused for a planning call and resumed after it, only if it was on;
nested and overlapping pauses share one; a pause that outlasts MAX_PAUSE_S collects once when the next call starts;
the collector is back on after an optimize call; the last pause's end collects the call's cycles and freezes what
the call left alive (thawed every THAW_S); the warm cache's pieces hold no cycles (an evicted entry is freed by its
reference counts, so freezing them leaks nothing)."""

from __future__ import annotations

import gc
import threading
import weakref

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


class _Node:
    """An object in a reference cycle (weakly referable)."""

    def __init__(self):
        self.me = self


def test_the_last_pause_collects_the_calls_cycles_and_freezes_the_rest(monkeypatch):
    gc.unfreeze()
    kept = []
    with gc_paused():
        dropped = weakref.ref(_Node())  # a cycle the call drops: only the collector frees it
        kept.append(_Node())
        with gc_paused():
            pass
        assert dropped() is not None and gc.get_freeze_count() == 0  # (the outer pause holds: nothing done)
    assert dropped() is None  # collected at the end, not frozen
    assert gc.get_freeze_count() > 0 and gc.isenabled()  # what the call left alive: out of later collections' sight
    monkeypatch.setattr(gc_pause, "THAW_S", -1.0)
    with gc_paused():
        pass
    assert gc.get_freeze_count() == 0 and gc.isenabled()  # thawed: the next full collection sees everything again


def test_the_warm_cache_holds_no_cycles(fresh_warm_cache):
    """A warm entry's pieces (costs, memo, bounds' parts, tables' floats, spaces, enumeration memo) are freed by their
    reference counts when the entry goes: a full collection after the cache is cleared finds no garbage."""
    from benchmarks.solver_speed import SCENARIOS
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    spec = validate_spec(dict(SCENARIOS)["8B / 8 H100, 8K"])
    for _ in range(3):  # (the third keeps its space)
        optimize(spec, controls=SolverControls(deterministic=True))
    (entry,) = fresh_warm_cache._entries.values()
    assert entry.memo and entry.base_costs and entry.spaces and entry.enumerations
    gc.unfreeze()
    gc.collect()
    freed = weakref.ref(entry)
    del entry
    fresh_warm_cache.clear()
    assert freed() is None and gc.collect() == 0
