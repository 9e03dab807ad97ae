"""The per-framework solves of :func:`frameworks.compare.best_per_framework` on more than one core (issue 41 item 1).

Each framework's solve is one exact ``optimize`` (top 1) independent of the others': its answer does not depend on
which process solves it, nor on the seeds it was handed (a seed only adds an early incumbent: solver/search.py). So
``solver-cli optimize`` solves them in worker processes forked beside its own (``fork``: the imports, the spec and
the first result are inherited, nothing is pickled on the way in), every process taking the next framework not yet
started from one shared counter, and each worker sending each answer back over a pipe as it has it (pickled).

Fallbacks, each to the sequential solve of the answers missing (the same code the single process runs, so an error it
raises is raised as before): no ``fork`` on the platform, one core, a thread already running in the process (forking
a threaded process can copy a lock another thread holds: a server never forks here), a process whose resident set
times the processes would pass :data:`FORK_MEMORY_SHARE` of the call's memory budget (each process checks its own
RSS against the budget), ``PARPLAN_PER_FRAMEWORK_WORKERS=0`` (a number N: at most N workers), a worker that fails
to start, dies or cannot send an answer (the parent solves that framework itself while time is left). The time
limit: each solve's limit is its share of the time left (the frameworks not yet started, spread over the
processes), a worker still busy :data:`GRACE_S` past the call's deadline is killed, and a framework it had not
answered is solved here in the time left, which is none: UNKNOWN, "not solved: the call's time limit was spent".
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import os
import sys
import threading
import time
from typing import Callable, Optional

from parplan.solver.deadline import MemoryBudget, rss_bytes

WORKERS_ENV = "PARPLAN_PER_FRAMEWORK_WORKERS"  # at most this many workers (0: one process, as the library solves)
GRACE_S = 0.25  # how long past the call's deadline the parent waits for a worker's answer before killing it
# a worker's pipe holds this many bytes (Linux's default most for a user, /proc/sys/fs/pipe-max-size) so that its
# answers (~12 KB pickled each on the README example) wait there, not in a blocked send, until the parent reads them
PIPE_BYTES = 1 << 20
# fork only while the processes' resident sets (each counted as this one's now) fit this share of the memory budget
FORK_MEMORY_SHARE = 0.5


def worker_count(frameworks: int, memory_budget_mib: Optional[int]) -> int:
    """How many worker processes to fork beside this one for ``frameworks`` solves: one per further core the process
    may run on, at most one per framework, fewer where the memory budget is short; 0 where forking is not safe or
    not available (module docstring)."""
    if frameworks < 1 or not hasattr(os, "fork") or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    if threading.active_count() > 1:
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    extra = min(cores - 1, frameworks)  # this process has the spec's own solve first
    most = os.environ.get(WORKERS_ENV, "").strip()
    if most.isdigit():
        extra = min(extra, int(most))
    limit = MemoryBudget.of_mib(memory_budget_mib).limit_bytes * FORK_MEMORY_SHARE
    rss = rss_bytes()
    while extra > 0 and rss * (extra + 1) > limit:
        extra -= 1
    return max(0, extra)


def solves_left(waiting: int, processes: int) -> int:
    """How many solves the process starting one has still to start, this one included, when ``waiting`` frameworks
    are not yet started (this one included) and ``processes`` share them: the divisor of its share of the time left
    (one process: an equal share among the frameworks still to run)."""
    return math.ceil(waiting / processes)


class Workers:
    """``workers`` processes forked now, each solving the first of ``count`` frameworks not yet taken by any process
    (``solve(j, solves)``, ``solves``: :func:`solves_left`), until :meth:`finish` has this process join in, from
    the last framework not taken backwards (frameworks/compare.py ``solve_order`` puts last those whose cost pieces
    are the spec's own, the same conventions: solver/warm_cache.py, which this process holds), and collects their
    answers. The last ``reserved`` frameworks are this process's alone: a worker stops before them (DeepSeek-V3 on
    2,048 H800, Megatron-Core: 1.38-1.83 s of CPU cold, as a worker that took it solved it, 0.87-1.05 s after the
    spec's own solve, load ~4); each solve here counts them among those it has still to start. Where the spec's own
    solve outlasts the workers' frameworks by more than that saving, a worker taking them would end sooner: on none of
    benchmarks/solver_speed.py's 13 scenarios (each worker was still busy when this process's own solve ended)."""

    def __init__(self, count: int, solve: Callable[[int, int], object], workers: int, reserved: int = 0):
        ctx = multiprocessing.get_context("fork")
        # [first, end) not yet taken; the workers take below the third (the reserved start) only
        self.count, self.queue, self.started = count, ctx.Array("i", [0, count, count - reserved]), []
        sys.stdout.flush()
        sys.stderr.flush()  # a forked child flushes its copy of the buffers when it exits: nothing printed twice
        gc.freeze()  # the objects so far out of the workers' collections: their pages stay shared, not copied
        try:
            self._fork(solve, workers, ctx)
        finally:
            gc.unfreeze()  # this process collects as before

    def _fork(self, solve: Callable[[int, int], object], workers: int, ctx) -> None:
        for _ in range(workers):
            recv, send = ctx.Pipe(duplex=False)
            _widen(send)
            proc = ctx.Process(target=_work, args=(self.queue, solve, workers + 1, send), daemon=True)
            try:
                proc.start()
            except OSError:  # no fork now (process or memory limits): fewer workers
                recv.close()
                break
            finally:
                send.close()
            self.started.append((proc, recv))

    def finish(self, solve: Callable[[int, int], object], deadline: Optional[float]) -> list:
        """Every framework's answer: those no process has taken yet solved here (``solve``), the workers' received
        until they are done or the call's ``deadline`` (``time.monotonic()``) has passed by :data:`GRACE_S`; one a
        worker did not send (it failed, or was killed at the deadline) solved here, in the time left (``solve``
        answers UNKNOWN itself once the time is spent)."""
        out: list = [None] * self.count
        try:
            for j, solves in _taken(self.queue, len(self.started) + 1, last=True):
                out[j] = solve(j, solves)
            for proc, recv in self.started:
                _collect(proc, recv, out, deadline)
        finally:
            self.close()
        missing = [j for j in range(self.count) if out[j] is None]
        for n, j in enumerate(missing):
            out[j] = solve(j, len(missing) - n)
        return out

    def close(self) -> None:
        """End the workers (killed where still running) and their pipes."""
        for proc, recv in self.started:
            if proc.is_alive():
                proc.kill()
            proc.join()
            recv.close()
        self.started = []


def _widen(conn) -> None:
    """The pipe behind ``conn`` widened to :data:`PIPE_BYTES` where the platform allows it (else it keeps its size:
    a send then waits for the parent's read, the same answers later)."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


def _taken(queue, processes: int, last: bool = False):
    """(framework, the solves this process has still to start, it included: :func:`solves_left` of those the
    ``processes`` share, plus the reserved ones left where ``last``) for each framework this process takes: the first
    not taken by any process below the reserved start (``last``: the last, reserved or not), until none is left."""
    while True:
        with queue.get_lock():
            first, end, shared_end = queue[0], queue[1], queue[2]
            if first >= (end if last else min(end, shared_end)):
                return
            if last:
                queue[1] = end - 1
            else:
                queue[0] = first + 1
        shared = solves_left(max(0, min(end, shared_end) - first), processes)
        yield (end - 1 if last else first), shared + (max(0, end - max(shared_end, first)) if last else 0)


def _work(queue, solve: Callable[[int, int], object], processes: int, send) -> None:
    """A worker's loop: solve the first framework not taken, send ``(j, answer)``; ``(j, None)`` where the solve or
    the pickling failed (the parent then solves it again itself, and meets the same error where it is one)."""
    try:
        for j, solves in _taken(queue, processes):
            try:
                send.send((j, solve(j, solves)))
            except BaseException:
                send.send((j, None))
                return
    finally:
        send.close()


def _collect(proc, recv, out: list, deadline: Optional[float]) -> None:
    """A worker's answers into ``out`` until it is done, dies, or the call's deadline (plus :data:`GRACE_S`)
    passes: then it is killed (its answers missing stay None)."""
    while True:
        wait = None if deadline is None else max(0.0, deadline + GRACE_S - time.monotonic())
        if not recv.poll(wait):
            proc.kill()
            return
        try:
            j, answer = recv.recv()
        except (EOFError, OSError):  # done, or died
            return
        out[j] = answer
