"""The min-plus knapsack in blocks of totals (``solver/oracle/blocked_sum.py``, issue 37 item 5): the oracle's
own answer where the vectorised knapsack would not fit in memory (it used to hand those tables to the CP-SAT
model it exists to check). On random tables it returns the vectorised recursion's value and split, tie-break
included, with blocks of every size; whole tables solved through it (and through the summed-time walk of
tables too large to pool) answer as before; its memory stays within its blocks where the vectorised recursion
would take hundreds of MiB; and it stops at the deadline."""

from __future__ import annotations

import time
import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.solver.deadline import OverBudget, TimeUp
from parplan.solver.oracle import blocked_sum, knapsack, per_stage, solve_table
from parplan.solver.oracle.blocked_sum import blocked_sum_split, blocked_sum_value
from parplan.solver.oracle.fallback import per_stage_by_cpsat
from parplan.solver.oracle.knapsack import free_steps, least_sum
from parplan.solver.oracle.recompute import INF
from parplan.solver.problem import Problem
from tests.conftest import sized
from tests.costmodel.schedules.test_uneven_bubble import SMALL, pressured

SLOPE = 5  # every row's time per step up to its free count (tables.build_table: one per-layer time on every unit)


@st.composite
def knapsack_tables(draw):
    """(times, caps, spare_steps, layers_min, grid): rows that grow by SLOPE a step up to a free count and by
    SLOPE plus a small extra (ties likely) beyond, some ending in INF (counts that do not fit), a few with an INF
    inside."""
    num_units = draw(st.integers(1, 5))
    spare_steps = draw(st.integers(0, 12))
    width = spare_steps + 1 + draw(st.integers(0, 2))
    rows = []
    for _ in range(num_units):
        extra = draw(st.lists(st.sampled_from([0, 0, 1, 2, 7]), min_size=width - 1, max_size=width - 1))
        free = draw(st.integers(0, width - 1))
        steps = [SLOPE + (e if q >= free else 0) for q, e in enumerate(extra)]
        row = np.cumsum([draw(st.integers(0, 30))] + steps).astype(np.int64)
        fits = draw(st.integers(1, width))
        row[fits:] = INF
        if draw(st.integers(0, 4)) == 0:  # now and then a count inside that does not fit either
            row[draw(st.integers(0, width - 1))] = INF
        rows.append(row)
    caps = np.array(draw(st.lists(st.integers(-1, spare_steps + 1), min_size=num_units, max_size=num_units)))
    layers_min = np.array(draw(st.lists(st.integers(1, 4), min_size=num_units, max_size=num_units)))
    return np.stack(rows), caps, spare_steps, layers_min, draw(st.sampled_from([1, 2]))


@settings(max_examples=sized(300, 1500), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(table=knapsack_tables(), block_entries=st.integers(1, 40), with_free=st.booleans(), split=st.booleans())
def test_blocks_answer_as_the_vectorised_knapsack(table, block_entries, with_free, split):
    """Forced into blocks (the vectorised limit at 0, blocks of 1-40 candidates): the same least sum and the
    same split as the vectorised recursion, with and without the free floors."""
    times, caps, spare_steps, layers_min, grid = table
    free = free_steps(times, SLOPE) if with_free else None
    want = least_sum(times, caps, spare_steps, layers_min, grid, free, split)
    used = []

    def counted(*args, **kwargs):
        used.append(1)
        return (blocked_sum_split if split else blocked_sum_value)(*args, **kwargs)

    name = "blocked_sum_split" if split else "blocked_sum_value"
    with mock.patch.object(knapsack, "KNAPSACK_LIMIT", 0), mock.patch.object(knapsack, name, counted), \
            mock.patch.object(blocked_sum, "BLOCK_ENTRIES", block_entries):
        got = least_sum(times, caps, spare_steps, layers_min, grid, free, split)
    assert got[0] == want[0]
    assert list(got[1]) == list(want[1])
    reaches_recursion = (np.minimum(caps, spare_steps) >= 0).all() and np.minimum(caps, spare_steps).sum() >= spare_steps
    if reaches_recursion and not with_free:
        assert used  # the blocked recursion answered, not the vectorised one


def _tables(spare_share, sizes=(("1f1b", 40), ("1f1b", 61), ("zb-h1", 37)), pp=4):
    """Pressured tables (4 stages: sizes' schedules and layer counts) whose least recompute (and Σ_u time_u)
    depends on the split."""
    for schedule, layers in sizes:
        data = dict(model={**SMALL, "num_layers": layers},
                    training=dict(seq_len=2048, global_batch_size=pp * 4),
                    cluster=dict(gpu="H100-SXM-80GB", num_gpus=pp),
                    search=dict(tp=[1], cp=[1], pp=[pp], micro_batch_size=[1], schedules=[schedule],
                                stage_split="per_stage", recompute=["full"], zero_stages=[1]))
        spec = pressured(data, dict(pp=pp, vpp=1, schedule=schedule, micro_batch_size=1, zero_stage=1), spare_share)
        problem = Problem.build(spec)
        yield problem.table(0), problem.cap_kib


@pytest.mark.parametrize("share", [0.3, 0.7])
def test_whole_tables_solve_the_same_through_the_blocks(share):
    """The oracle on pressured tables with every knapsack forced into blocks of 64 candidates: the same U and
    the same assignment as with the vectorised knapsack; the blocks were used."""
    used = []
    split = knapsack.blocked_sum_split

    def counted(*args, **kwargs):
        used.append(1)
        return split(*args, **kwargs)

    for t, cap in _tables(share):
        want = solve_table(t, cap)
        with mock.patch.object(knapsack, "KNAPSACK_LIMIT", 0), mock.patch.object(blocked_sum, "BLOCK_ENTRIES", 64), \
                mock.patch.object(knapsack, "blocked_sum_split", counted):
            got = solve_table(t, cap)
        assert want is not None and got is not None
        assert (got.U, got.x) == (want.U, want.x)
    assert used


class _NoRoom:
    """A memory budget with room for nothing."""

    def fits(self, nbytes):
        return False

    def require(self, nbytes, what):
        raise OverBudget(what, int(nbytes), 0)


def test_tables_too_large_to_pool_take_the_summed_walk_within_the_budget_else_the_model():
    """Beyond the pooled limit a table whose Σ_u time_u varies takes the same summed-time walk (same answer)
    where its tables fit the memory budget, and the CP-SAT model's answer (solver/oracle/fallback.py, the same
    optimum) where they do not."""
    routed = []

    def via_cpsat(solve, units):
        routed.append(solve.t)
        return per_stage_by_cpsat(solve, units)

    for t, cap in _tables(0.5):
        want = solve_table(t, cap)
        with mock.patch.object(per_stage, "POOLED_LIMIT", 0):
            got = solve_table(t, cap)
            assert (got.U, got.x) == (want.U, want.x)
            with mock.patch.object(per_stage, "budget", _NoRoom), \
                    mock.patch.object(per_stage, "per_stage_by_cpsat", via_cpsat):
                assert solve_table(t, cap).U == want.U
    assert routed  # the over-budget tables did go to the CP-SAT model


def _linear_rows(num_units: int, spare_steps: int) -> np.ndarray:
    """Unit u's time at q steps: (u + 1)·q, so the least sum fills the cheapest units first."""
    return (np.arange(1, num_units + 1)[:, None] * np.arange(spare_steps + 1)[None, :]).astype(np.int64)


def test_memory_stays_within_the_blocks():
    """3 units, 3,000 steps, caps 1,500: the vectorised recursion would form 3,001 × 1,501 candidates per unit in
    several int64 arrays (hundreds of MiB); the blocks keep the traced peak under 64 MiB. The value by hand:
    the cheapest units fill first, unit 0 takes 1,500 steps at 1 each, unit 1 the other 1,500 at 2 each."""
    spare_steps, cap = 3000, 1500
    times = _linear_rows(3, spare_steps)
    caps = np.full(3, cap)
    tracemalloc.start()
    try:
        value = blocked_sum_value(times, caps, spare_steps)
        total, steps = blocked_sum_split(times, caps, spare_steps, np.ones(3, np.int64), 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert value == total == 1 * cap + 2 * cap
    assert list(steps) == [cap, cap, 0]
    assert peak < 64 << 20, peak


def test_the_blocks_stop_at_the_deadline():
    times = _linear_rows(3, 50)
    with pytest.raises(TimeUp):
        blocked_sum_value(times, np.full(3, 50), 50, deadline=time.perf_counter() - 1)
    with pytest.raises(TimeUp):
        blocked_sum_split(times, np.full(3, 50), 50, np.ones(3, np.int64), 1, deadline=time.perf_counter() - 1)
