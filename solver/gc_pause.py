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
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from typing import Iterator

MAX_PAUSE_S = 10.0  # past this long a pause shared by overlapping calls, the next call to start collects once

_lock = threading.Lock()
_state = {"depth": 0, "was_enabled": False, "since": 0.0}


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
        with _lock:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["was_enabled"]:
                gc.enable()
