"""solver/cpsat_stopper.py: one thread stops the registered CP-SAT solves on cancellation or past the budget."""

from __future__ import annotations

import threading
import time

from parplan.solver.cpsat_stopper import POLL_S, Stopper
from parplan.solver.deadline import call_limits
from tests.solver.test_deadline import rss_at  # noqa: F401  (the fixture)


class FakeSolver:
    def __init__(self) -> None:
        self.stops = 0

    def stop_search(self) -> None:
        self.stops += 1


def wait_for(predicate, timeout_s: float = 2.0) -> bool:
    end = time.perf_counter() + timeout_s
    while time.perf_counter() < end:
        if predicate():
            return True
        time.sleep(POLL_S / 4)
    return predicate()


def test_a_cancelled_solve_is_stopped_and_a_released_one_no_more():
    stopper, cancel = Stopper(), threading.Event()
    quiet, cancelled = FakeSolver(), FakeSolver()
    t_quiet = stopper.watch(quiet, threading.Event(), None)
    token = stopper.watch(cancelled, cancel, None)
    time.sleep(3 * POLL_S)
    assert cancelled.stops == 0 and quiet.stops == 0  # nothing asks it to stop yet
    cancel.set()
    assert wait_for(lambda: cancelled.stops > 0)
    stopper.release(token)
    time.sleep(2 * POLL_S)  # a pass in flight may still stop it once
    seen = cancelled.stops
    time.sleep(4 * POLL_S)
    assert cancelled.stops == seen and quiet.stops == 0
    stopper.release(t_quiet)


def test_one_thread_for_every_solve():
    stopper = Stopper()
    tokens = [stopper.watch(FakeSolver(), threading.Event(), None) for _ in range(5)]
    thread = stopper._thread
    for token in tokens:
        stopper.release(token)
    stopper.release(stopper.watch(FakeSolver(), None, None))
    assert stopper._thread is thread and thread.is_alive()


def test_a_solve_past_the_memory_budget_is_stopped(rss_at):
    stopper, solver = Stopper(), FakeSolver()
    rss_at(100)
    with call_limits(None, None, 256) as limits:
        token = stopper.watch(solver, None, limits)
        time.sleep(3 * POLL_S)
        assert solver.stops == 0
        rss_at(300)
        assert wait_for(lambda: solver.stops > 0)
        stopper.release(token)


def test_a_child_forked_while_the_lock_is_held_watches_its_own_solves():
    """A fork copies the stopper's lock as it is: held by the parent's thread mid-pass, it would block the child's
    first solve for ever; the child starts over (a fresh lock, no watched solve, its own thread)."""
    import os

    import pytest

    from parplan.solver.cpsat_stopper import STOPPER

    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    with STOPPER._cond:  # held, as by the thread mid-pass
        pid = os.fork()
        if pid == 0:  # the child: a solve watched and stopped on its cancel, within a second
            code = 1
            try:
                import signal

                signal.alarm(5)  # (blocked on the copied lock: killed, never a hung test)
                cancel, solver = threading.Event(), FakeSolver()
                token = STOPPER.watch(solver, cancel, None)
                cancel.set()
                code = 0 if wait_for(lambda: solver.stops > 0, 1.0) else 2
                STOPPER.release(token)
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_solve_past_its_deadline_is_stopped():
    """A solve watched with a deadline (the step-order cut loop's, solver/step_order_cuts.py) is stopped once
    ``time.perf_counter()`` passes it, and not before."""
    stopper, solver = Stopper(), FakeSolver()
    token = stopper.watch(solver, None, None, time.perf_counter() + 10 * POLL_S)
    time.sleep(3 * POLL_S)
    assert solver.stops == 0
    assert wait_for(lambda: solver.stops > 0)
    stopper.release(token)
