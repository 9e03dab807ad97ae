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


def test_what_the_last_pause_leaves_goes_to_the_oldest_generation_unwalked(monkeypatch):
    """Its survivors are moved, not walked by a young collection (the young count starts over), and the collector is
    back on."""
    monkeypatch.setitem(gc_pause._state, "moved", 0)
    monkeypatch.setitem(gc_pause._state, "tracked", 10 ** 9)  # no full collection
    with gc_paused():
        kept = [[] for _ in range(1000)]  # tracked objects, more than the young generation's threshold
    assert gc.isenabled()
    assert gc.get_count()[0] < gc.get_threshold()[0]
    assert any(o is kept for o in gc.get_objects(generation=2))


def test_a_full_collection_once_the_objects_moved_pass_the_share_of_those_tracked(monkeypatch):
    """The first pause's end counts the tracked objects (T); later ones move their survivors until those moved since
    pass FULL_COLLECTION_GROWTH·T, whose pause collects every generation once and counts again."""
    collected, kept = [], []
    monkeypatch.setattr(gc_pause, "FULL_COLLECTION_GROWTH", 0.5)
    monkeypatch.setitem(gc_pause._state, "moved", 0)
    monkeypatch.setitem(gc_pause._state, "tracked", None)
    monkeypatch.setattr(gc_pause.gc, "collect", lambda *a: collected.append(a) or 0)
    with gc_paused():
        with gc_paused():  # a nested pause ends nothing
            pass
    tracked = gc_pause._state["tracked"]
    assert tracked > 0 and not collected
    with gc_paused():
        kept.append([[] for _ in range(tracked // 4)])  # a quarter: moved, not collected
    assert not collected and gc_pause._state["moved"] > 0  # (the young count: allocations less frees)
    with gc_paused():
        kept.append([[] for _ in range(tracked // 2)])  # some three quarters in all: one full collection
    assert collected == [()] and gc_pause._state["moved"] == 0
    assert gc.isenabled()


def test_objects_frozen_by_someone_else_stay_frozen():
    marker = [[]]  # a tracked object, frozen with the rest (the frozen count falls as frozen objects are freed)
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        with gc_paused():
            pass
        assert gc.get_freeze_count() > 0 and gc.isenabled()  # (unfrozen, it would be 0: marker in generation 2)
        assert not any(o is marker for o in gc.get_objects(generation=2))
    finally:
        gc.unfreeze()
