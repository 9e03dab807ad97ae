"""The cyclic garbage collector paused while a call plans: its objects hold (almost) no reference cycles.

A planning call builds many objects that stay alive for its length: a :class:`~parplan.costmodel.evaluation.choice.Choice`
per candidate (DeepSeek-V3 on 2,048 H800: 116k, each with its ``__dict__``), the cost pieces of its memo, its tables.
Each allocation counts towards CPython's next collection, and a collection of the oldest generation walks every object
alive: on this project's 2-core machine ~0.8 s of the ~4.7 s of CPU of ``solver-cli optimize`` on that scenario
(``--no-per-framework``; 3.9 s with the collector off) went so, and the space's enumeration took 0.6 s against 0.4 s.
What such a call leaves for the collector is little: 4,294 objects in reference cycles after that solve with the
collector off (``gc.collect()``'s count), the peak resident set the same (253 MB against 255 MB). So the planner runs
with the collector paused (:func:`gc_paused`: solver/planner.py's ``optimize``, Problem.build) and resumes it after,
when it runs as before. Nested and concurrent calls (the service's threads) share one pause: the collector resumes when
the last one ends, and only if it was on before the first began; while calls keep overlapping, a call that starts
after :data:`MAX_PAUSE_S` of pause collects once (``gc.collect()``), so what cycles the calls leave never wait longer.

When the last pause ends, what it leaves alive (the warm cache's pieces, a kept search space: 165k tracked objects after
DeepSeek-V3's first solve, 397k after its second) would be walked by the youngest generation's collection that the
next allocation starts (the count of the objects allocated meanwhile passes its threshold at once), finding nothing
(0 collected on that scenario's first three calls) for ~0.1-0.2 s of each call's CPU. So it is moved to the oldest
generation instead (``gc.freeze()`` then ``gc.unfreeze()``: two list splices, which also zero the young count), and
a pause ends with one full collection (``gc.collect()``), which reaches them, once the objects moved so since the last
one (each pause's young count: its tracked allocations less its frees) pass :data:`FULL_COLLECTION_GROWTH` times the
objects tracked after it (counted at the first pause's end, then after each full collection), as CPython's own rule
for its oldest generation does with a quarter: what cycles the calls leave stay a bounded share of what is alive,
and a run of small warm requests, which leave little, is not collected in full every few calls. Where the process
holds objects frozen by someone else (``gc.get_freeze_count()``), the pause ends as before (unfreezing would release
them).
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from typing import Iterator

MAX_PAUSE_S = 10.0  # past this long a pause shared by overlapping calls, the next call to start collects once
FULL_COLLECTION_GROWTH = 1.0  # a full collection once the objects moved uncollected pass this share of those tracked

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False, "since": 0.0, "moved": 0, "tracked": None}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off for the ``with`` block (module docstring)."""
    collect = False
    with _lock:
        now = time.monotonic()
        if _state["depth"] == 0:
            _state["was_enabled"] = gc.isenabled()
            _state["since"] = now
            gc.disable()
        elif _state["was_enabled"] and now - _state["since"] > MAX_PAUSE_S:
            _state["since"], collect = now, True
        _state["depth"] += 1
    if collect:
        gc.collect()
    try:
        yield
    finally:
        full = False
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                full = _survivors_to_oldest()
                gc.enable()
        if full:
            gc.collect()
            with _lock:
                _state["tracked"], _state["moved"] = len(gc.get_objects()), 0


def _survivors_to_oldest() -> bool:
    """At the last pause's end (the lock held, the collector still off): what is alive moved to the oldest generation
    unwalked, or True once the objects moved so pass :data:`FULL_COLLECTION_GROWTH` times those tracked: the caller
    collects every generation once (module docstring). Nothing moved where objects frozen by someone else are held."""
    if gc.get_freeze_count():
        return False
    young = gc.get_count()[0]
    if _state["tracked"] is None:  # the first pause's end: what it leaves counted among the tracked
        _state["tracked"] = len(gc.get_objects())
    elif _state["moved"] + young > FULL_COLLECTION_GROWTH * _state["tracked"]:
        return True
    else:
        _state["moved"] += young
    gc.freeze()
    gc.unfreeze()
    return False
