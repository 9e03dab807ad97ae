"""frameworks/compare_workers.py: the per-framework solves on forked workers give the one-process answers, fall
back to solving here when a worker fails, and end at the call's deadline."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time

import pytest

from parplan.frameworks import compare_workers
from parplan.frameworks.compare_workers import Workers, solves_left, worker_count

FORK = "fork" in multiprocessing.get_all_start_methods() and hasattr(os, "fork")
needs_fork = pytest.mark.skipif(not FORK, reason="no fork on this platform (the workers are never started there)")


def test_solves_left_is_the_one_process_share():
    """One process: an equal share among the frameworks still to run (n - i of them), as the sequential loop
    gives; two processes: each has half of them (rounded up) still to start."""
    assert [solves_left(4 - i, 1) for i in range(4)] == [4, 3, 2, 1]
    assert [solves_left(w, 2) for w in (4, 3, 2, 1)] == [2, 2, 1, 1]


def test_no_workers_where_forking_is_not_safe_or_not_wanted(monkeypatch):
    monkeypatch.setattr(compare_workers.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv(compare_workers.WORKERS_ENV, raising=False)
    # this process as a fresh CLI's: small and single-threaded (late in the suite pytest holds ~1.4 GiB, and a test
    # before may leave a thread behind)
    monkeypatch.setattr(compare_workers, "rss_bytes", lambda: 64 << 20)
    monkeypatch.setattr(compare_workers.threading, "active_count", lambda: 1)
    assert worker_count(4, None) == (3 if FORK else 0)
    assert worker_count(2, None) == (2 if FORK else 0)  # at most one per framework
    assert worker_count(0, None) == 0
    monkeypatch.setenv(compare_workers.WORKERS_ENV, "0")
    assert worker_count(4, None) == 0
    monkeypatch.setenv(compare_workers.WORKERS_ENV, "1")
    assert worker_count(4, None) == (1 if FORK else 0)
    monkeypatch.delenv(compare_workers.WORKERS_ENV)
    monkeypatch.setattr(compare_workers, "rss_bytes", lambda: 1 << 30)  # 1 GiB resident: two do not fit 1.5 GiB / 2
    assert worker_count(4, None) == 0
    assert worker_count(4, 8192) == (3 if FORK else 0)
    monkeypatch.undo()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:  # a threaded process (a server) never forks
        assert worker_count(4, None) == 0
    finally:
        stop.set()
        thread.join()


@needs_fork
def test_workers_answer_each_framework_once_in_order():
    parent = os.getpid()
    calls = []

    def solve(j, solves):
        calls.append(j)
        return ("worker" if os.getpid() != parent else "parent", j, solves)

    out = Workers(5, solve, 1).finish(solve, deadline=None)
    assert [j for _, j, _ in out] == [0, 1, 2, 3, 4]
    assert {who for who, _, _ in out} <= {"worker", "parent"}
    assert all(1 <= solves <= 3 for _, _, solves in out)  # ceil(waiting / 2) of at most 5 waiting
    assert sorted(calls) == sorted(j for who, j, _ in out if who == "parent")  # the parent's own, each once


@needs_fork
def test_the_reserved_frameworks_are_this_process_s():
    """A worker stops before the last ``reserved`` frameworks, though it is free long before this process joins in;
    this process counts them among the solves it has still to start (its time shares)."""
    parent = os.getpid()

    def solve(j, solves):
        return ("worker" if os.getpid() != parent else "parent", j, solves)

    workers = Workers(5, solve, 1, reserved=2)
    time.sleep(1.0)  # the worker has long taken what it may
    out = workers.finish(solve, deadline=None)
    assert [(who, j) for who, j, _ in out] == [("worker", 0), ("worker", 1), ("worker", 2), ("parent", 3),
                                              ("parent", 4)]
    assert [solves for _, _, solves in out[3:]] == [1, 2]  # framework 4 first, with 3 still to start
    assert Workers(2, solve, 1, reserved=2).finish(solve, deadline=None) == [("parent", 0, 1), ("parent", 1, 2)]


@needs_fork
@pytest.mark.parametrize("failure", ["raises", "unpicklable"])
def test_a_failed_worker_solve_is_solved_here(failure):
    """A worker whose solve raises, or whose answer cannot be pickled, sends no answer for it: the parent solves that
    framework itself (and meets the same error where it is one)."""
    parent = os.getpid()

    def solve(j, solves):
        if os.getpid() != parent:
            if failure == "raises":
                raise RuntimeError("worker failure")
            return lambda: None  # not picklable
        return ("parent", j)

    assert Workers(3, solve, 1).finish(solve, deadline=None) == [("parent", 0), ("parent", 1), ("parent", 2)]


@needs_fork
def test_a_worker_past_the_deadline_is_killed_and_its_framework_answered_here():
    parent = os.getpid()

    def solve(j, solves):
        if os.getpid() != parent:
            time.sleep(60)  # a worker stuck in its first framework
        return ("parent", j)

    t0 = time.monotonic()
    workers = Workers(2, solve, 1)
    time.sleep(0.2)  # the worker has taken framework 0
    out = workers.finish(lambda j, solves: ("here", j, time.monotonic() > t0 + 0.5), deadline=t0 + 0.5)
    took = time.monotonic() - t0
    assert took < 0.5 + compare_workers.GRACE_S + 2.0
    assert out[0] == ("here", 0, True)  # answered here after the deadline (the real solve says UNKNOWN then)
    assert not any(p.is_alive() for p, _ in workers.started)


@needs_fork
@pytest.mark.parametrize("framework", ["", "framework: any\n"])
def test_concurrent_per_framework_answers_are_the_one_process_answers(monkeypatch, framework):
    """The per-framework lines with a worker forked before the spec's own solve are byte-identical to the one-process
    lines (each solve is exact), in the same order, and each framework's time limit is still its share of the time
    left; under ``any`` the workers take the frameworks in compare.solve_order's order (Megatron-Core, whose pieces
    are the spec's own, last: this process's)."""
    import yaml

    from parplan.frameworks.compare import FrameworkSolves, best_per_framework
    from parplan.frameworks.loader import validate_spec
    from parplan.library.contract import framework_best_to_dict
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    data = yaml.safe_load(
        "model: {name: llama3-8b, num_layers: 32, hidden_size: 4096, ffn_hidden_size: 14336, num_attention_heads: 32,"
        " num_kv_heads: 8, vocab_size: 128256}\n"
        "training: {seq_len: 8192, global_batch_size: 64, precision: bf16}\n"
        "cluster: {gpu: H100-SXM-80GB, num_gpus: 8, gpus_per_node: 8}\n" + framework)
    spec = validate_spec(data)
    controls = SolverControls(workers=1, deterministic=True)
    monkeypatch.setattr(compare_workers, "worker_count", lambda frameworks, budget_mib: 1)
    solves = FrameworkSolves(spec, deadline=time.monotonic() + 120, concurrent=True, method="cpsat",
                             controls=controls)
    assert solves.workers is not None and len(solves.workers.started) == 1
    assert solves.order == ([1, 2, 3, 0] if framework else [0, 1, 2, 3])
    from parplan.frameworks.compare import spec_for_framework
    from parplan.solver.warm_cache import spec_key

    sharing = [spec_key(spec_for_framework(spec, name)) == spec_key(spec) for name in solves.names]
    assert solves.workers.queue[2] == len(sharing) - sum(sharing)  # those whose pieces are the spec's: this process's
    assert not framework or sharing[0]  # under any: Megatron-Core
    result = optimize(spec, controls=controls)
    forked = solves.compared(result)
    alone = best_per_framework(spec, result, deadline=time.monotonic() + 120, method="cpsat", controls=controls)
    dump = lambda lines: json.dumps([framework_best_to_dict(e) for e in lines], sort_keys=True)  # noqa: E731
    assert [e.status for e in forked] == [e.status for e in alone] and dump(forked) == dump(alone)
    assert [e.framework for e in forked] == solves.names
    assert any(e.best is not None for e in forked)


@needs_fork
def test_cancel_ends_the_workers():
    def solve(j, solves):
        time.sleep(60)

    workers = Workers(2, solve, 1)
    procs = [p for p, _ in workers.started]
    workers.close()
    assert procs and not any(p.is_alive() for p in procs)
