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

What a call leaves alive is mostly the warm cache's new pieces (solver/warm_cache.py), which live on, hold no cycles
(an evicted entry is freed by its reference counts: tests/solver/test_gc_pause.py) and grow request by request, so
each later full collection would walk them all again (a warm service that has kept 41 specs: ~0.3 M tracked objects,
~130 ms a full collection, one every few requests). So when the last pause ends with the collector on before it,
the call's young objects are collected (``gc.collect(1)``: its cycles, what a normal first collection after the pause
would walk) and the survivors frozen (``gc.freeze``: out of the later collections' sight, freed by their reference
counts as before); every :data:`THAW_S` the frozen objects are handed back (``gc.unfreeze``) to the next full
collection, so a cycle that was alive at a freeze and died after waits at most that long; at the process's exit
they are handed back too (``atexit``), so the interpreter's last collection frees them as before (the objects of
native extensions, e.g. OR-Tools' nanobind models, are then not reported as leaked).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import threading
import time
from typing import Iterator

MAX_PAUSE_S = 10.0  # past this long a pause shared by overlapping calls, the next call to start collects once
THAW_S = 60.0  # the frozen objects go back to the collector this often (module docstring)

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False, "since": 0.0, "thawed": time.monotonic()}
atexit.register(gc.unfreeze)  # (module docstring)


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
        resumed = thaw = False
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()
                resumed = True
                now = time.monotonic()
                if now - _state["thawed"] > THAW_S:
                    _state["thawed"], thaw = now, True
        if resumed:
            _settle(thaw)


def _settle(thaw: bool) -> None:
    """The call's young objects collected, the survivors frozen, or (``thaw``) every frozen object handed back to
    the collector (module docstring). The lock is not held: a call that begins meanwhile may have its first objects
    frozen too, which changes none of them (a frozen object is freed by its reference counts as any other)."""
    gc.collect(1)
    if thaw:
        gc.unfreeze()
    else:
        gc.freeze()
