"""solver/search_queue.py: the level-0 candidates as a stream in quick-bound order, layer-bounded a chunk at a time once
a plan is known. Neither the chunk's size nor the layer bound itself changes a choice solved, their order, the limit
each is solved under or the answer (one candidate at a time, as the search bounded them before, is a chunk of 1; no
layer bound, a bound of 0); Problem.layer_bounds, the chunk's bound in one array pass, is Problem.layer_bound to the
last bit."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.solver_speed import SCENARIOS
from tests.conftest import small_specs, spec_repr
from parplan.frameworks.loader import validate_spec
from parplan.solver import search_queue
from parplan.solver.cpsat import SolverControls
from parplan.solver.problem import Problem
from parplan.solver.search import Searcher

ONE = SolverControls(workers=1, deterministic=True, time_limit_s=60)
MIXTRAL = "Mixtral 8x7B / 64 H100, 4K"


def _solves(monkeypatch, problem: Problem, chunk: int, method: str, k: int):
    """(every solve_choice call as (choice, cutoff), the outcome) of a search with chunks of ``chunk``."""
    monkeypatch.setattr(search_queue, "LAYER_CHUNK", chunk)
    s = Searcher(problem, method, ONE)
    calls = []
    solve = s.solve_choice

    def recorded(i, cap, cutoff=None):
        calls.append((i, cutoff))
        return solve(i, cap, cutoff)

    s.solve_choice = recorded
    out = s.best(problem.cap_kib, k)
    return calls, (out.status, [(f.row_index, f.x, f.U, f.peak_kib) for f in out.found], out.bound, out.searched)


def _same_for_every_chunk(monkeypatch, problem: Problem, method: str, k: int, label: str) -> None:
    """The same solves as a search without the layer bound (a bound of 0 parks nothing: each candidate goes on to its
    mean-unit bound), whatever the chunk."""
    with monkeypatch.context() as m:
        m.setattr(problem, "layer_bounds", lambda idx: np.zeros(len(idx)))
        want = _solves(m, problem, 1, method, k)
    for chunk in (1, 7, 256, 10**9):
        assert _solves(monkeypatch, problem, chunk, method, k) == want, (label, chunk)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(spec=small_specs(), k=st.sampled_from([1, 2, 5]), method=st.sampled_from(["exhaustive", "cpsat"]))
def test_the_chunk_size_changes_no_solve_and_no_answer(monkeypatch, spec, k, method):
    _same_for_every_chunk(monkeypatch, Problem.build(spec), method, k, spec_repr(spec))


def test_the_chunk_size_changes_no_solve_on_a_large_moe_space(monkeypatch):
    """Mixtral on 64 H100 (interleaved MoE, thousands of candidates layer-bounded past the first plan), top 1 and 3."""
    problem = Problem.build(validate_spec(dict(SCENARIOS)[MIXTRAL]))
    for k in (1, 3):
        _same_for_every_chunk(monkeypatch, problem, "cpsat", k, MIXTRAL)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs())
def test_layer_bounds_are_the_layer_bound_of_each_choice(spec):
    p = Problem.build(spec)
    idx = p.order(p.cap_kib)
    assert np.array_equal(p.layer_bounds(idx), np.array([p.layer_bound(i) for i in idx])), spec_repr(spec)


def test_layer_bounds_on_a_large_moe_space():
    """Every layer key kind of Mixtral's space (MoE, interleaved, SP on and off), a sample of 3,000 choices."""
    p = Problem.build(validate_spec(dict(SCENARIOS)[MIXTRAL]))
    idx = random.Random(3).sample(p.order(p.cap_kib), 3000)
    got = p.layer_bounds(idx)
    assert (got > 0).sum() > len(idx) // 2  # the bound says something
    assert np.array_equal(got, np.array([p.layer_bound(i) for i in idx]))


def test_the_queue_gives_the_heaps_order():
    """Entries pushed at levels ≥ 1 beside the level-0 stream come out as one heap of all of them gives them (a tie in
    bound: level 0 first, then by level and choice)."""
    import heapq

    class Stub:
        quick_lb = np.array([5.0, 1.0, 3.0, 3.0, 8.0])

        def order(self, cap):
            return [1, 2, 3, 0, 4]

    q = search_queue.SearchQueue(Stub(), 0)
    pushed = [(3.0, 1, 0), (0.5, 2, 4), (5.0, 2, 2), (3.0, 4, 1)]
    for e in pushed:
        q.push(e)
    want = sorted(pushed + [(float(Stub.quick_lb[i]), 0, i) for i in Stub().order(0)])
    got = []
    while q:
        assert q.least() == q.peek()[0]
        got.append(q.pop())
    assert got == want and heapq.nsmallest(len(want), want) == want
    assert q.least(7.0) == 7.0
