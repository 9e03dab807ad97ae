"""One thread that stops the CP-SAT solves of a process on cancellation, past the memory budget or past a deadline.

CP-SAT runs in C++ and reads no Python event, so a solve is stopped from another thread (``CpSolver.stop_search``)
once its call is cancelled or the process passes the call's memory budget (solver/deadline.py ``over_budget``).
solver/cpsat.py started a thread per solve for it; a warm service's request makes several solves, and on a loaded
machine starting a thread waits for the new thread to be scheduled (``Thread.start`` waits for it to run: ~0.1 ms
median, 3.6 ms at the 90th percentile measured on this 2-core machine under load 2). So every solve is watched by
one daemon thread, started on the first solve (again in a forked child, where it does not exist, with a fresh lock:
a fork may copy the lock held), which looks at the solves registered every :data:`POLL_S` as the per-solve thread did
and sleeps on a condition while none is. A solve watched with a deadline is stopped once it passes (CP-SAT's own
``max_time_in_seconds`` counts from its start and may overrun it; the step-order cut loop's solves, which must end
inside the call's deadline, are watched so).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Any, Optional

from parplan.solver.deadline import CallLimits, over_budget

POLL_S = 0.02  # how often a registered solve's cancel event and the memory budget are looked at (as before)


class Stopper:
    """The solves being watched, each (solver, cancel event, call limits) under a token, and the thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watched: dict[int, tuple[Any, Optional[threading.Event], Optional[CallLimits], Optional[float]]] = {}
        self._tokens = itertools.count()
        self._thread: Optional[threading.Thread] = None

    def after_fork(self) -> None:
        """In a forked child: no solve of the parent is the child's, its thread is gone and its lock may be held."""
        self._cond = threading.Condition()
        self._watched = {}
        self._thread = None

    def watch(self, solver: Any, cancel: Optional[threading.Event], limits: Optional[CallLimits],
              deadline: Optional[float] = None) -> int:
        """Watch ``solver`` until :meth:`release` of the token returned: stopped once ``cancel`` is set, the process
        is over ``limits``' budget or ``time.perf_counter()`` is past ``deadline`` (a stop before its solve starts is
        repeated every :data:`POLL_S` until released)."""
        with self._cond:
            token = next(self._tokens)
            self._watched[token] = (solver, cancel, limits, deadline)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cpsat-stopper", daemon=True)
                self._thread.start()
            self._cond.notify()
        return token

    def release(self, token: int) -> None:
        with self._cond:
            self._watched.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                if not self._watched:
                    self._cond.wait()
                    continue
                self._cond.wait(POLL_S)  # (a solve registered or released meanwhile: looked at on the next pass)
                now = time.perf_counter()
                for solver, cancel, limits, deadline in list(self._watched.values()):
                    if (cancel is not None and cancel.is_set()) or (deadline is not None and now > deadline) or \
                            (limits is not None and over_budget(limits)):
                        solver.stop_search()  # (under the lock: never a solver already released)


STOPPER = Stopper()
if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=STOPPER.after_fork)
