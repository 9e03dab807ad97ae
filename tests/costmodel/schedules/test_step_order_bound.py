"""The fill-busy-drain bound (costmodel/schedules/step_order_bound.py) against the step order it bounds
(costmodel/schedules/dualpipe_steps.py step_order_s), over random per-stage work: compute, all-to-all, other time,
forward share and zero-bubble weight share, lopsided stages included."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.costmodel.schedules.dualpipe_steps import StageWork, op_graph, step_order_s
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.schedules.step_order_bound import critical_path_form, fill_busy_drain_s, path_form_s


@st.composite
def stage_works(draw):
    """(schedule, StageWork, micro-batches m) with legal m (DualPipe: even, >= 2p; DualPipeV: >= 2P)."""
    schedule = draw(st.sampled_from([Schedule.DUALPIPE, Schedule.DUALPIPEV]))
    ranks = draw(st.sampled_from([2, 4, 6, 8]))
    stages = ranks if schedule is Schedule.DUALPIPE else 2 * ranks
    m = 2 * ranks + 2 * draw(st.integers(0, 2 * ranks))
    C = [draw(st.floats(0.05, 2.0)) for _ in range(stages)]
    X = [c * draw(st.sampled_from([0.0, 0.3, 0.8, 1.5, 3.0])) for c in C]
    E = [draw(st.floats(0.0, 0.5)) for _ in range(stages)]
    f = draw(st.sampled_from([0.25, 1 / 3, 0.5]))
    w = draw(st.sampled_from([0.0, 0.3, 0.5]))
    return schedule, StageWork(C, X, f, w, E), m


@settings(max_examples=120, deadline=None)
@given(stage_works())
def test_fill_busy_drain_is_a_lower_bound_of_the_step_order(case):
    """Every path of the step order's graph is at most its longest: the bound never exceeds the step order, and it
    is at least the busiest rank's busy time (the sum of its operations)."""
    schedule, work, m = case
    bound, exact = fill_busy_drain_s(schedule, work, m), step_order_s(schedule, work, m)
    assert bound <= exact * (1 + 1e-12)
    assert bound >= max(sum(d) for d in op_graph(schedule, work, m).durations_s) * (1 - 1e-12)


def test_fill_busy_drain_misses_the_round_trips():
    """Equal stages without all-to-all or deferred weights (DualPipe on 8 ranks, 32 micro-batches): busy 32, the
    middle rank's fill 3·1/3 and drain 3·2/3 give 35, while the step order waits on round trips through the
    neighbouring ranks too (36.67): the bound alone does not close, the critical path does."""
    work = StageWork([1.0] * 8, [0.0] * 8, 1 / 3, 0.0, [0.0] * 8)
    exact = step_order_s(Schedule.DUALPIPE, work, 32)
    assert fill_busy_drain_s(Schedule.DUALPIPE, work, 32) == pytest.approx(35.0)
    assert exact == pytest.approx(36.0 + 2 / 3)
    assert path_form_s(critical_path_form(Schedule.DUALPIPE, work, 32), work) == pytest.approx(exact)


def test_undefined_step_order_is_refused():
    with pytest.raises(ValueError):
        fill_busy_drain_s(Schedule.DUALPIPE, StageWork([1.0] * 4, [0.0] * 4, 1 / 3, 0.0), 6)


@settings(max_examples=120, deadline=None)
@given(stage_works(), st.data())
def test_critical_path_form_is_exact_at_its_work_and_a_cut_elsewhere(case, data):
    """The longest path of one work, compressed to counts per operation type, prices that work at its step order
    exactly, and any other work of the same (schedule, ranks, m) at most at that work's step order: it is a path
    of the same graph (a valid cut for a search that minimises over the works)."""
    schedule, work, m = case
    form = critical_path_form(schedule, work, m)
    assert path_form_s(form, work) == pytest.approx(step_order_s(schedule, work, m), rel=1e-12)
    n = len(work.C)
    other = StageWork([data.draw(st.floats(0.05, 2.0)) for _ in range(n)],
                      [data.draw(st.floats(0.0, 3.0)) for _ in range(n)], work.f, work.w,
                      [data.draw(st.floats(0.0, 0.5)) for _ in range(n)])
    assert path_form_s(form, other) <= step_order_s(schedule, other, m) * (1 + 1e-12)


def test_critical_path_form_is_compressed():
    """DeepSeek-V3's shape (DualPipe on 32 ranks, 480 micro-batches, lopsided first stage): the longest path runs
    thousands of operations but only a few dozen operation types."""
    C = [0.3] + [1.0] * 30 + [0.6]
    work = StageWork(C, [0.0] + [0.5] * 31, 1 / 3, 0.5, [0.1] * 32)
    form = critical_path_form(Schedule.DUALPIPE, work, 480)
    assert int(form.count.sum()) > 400
    assert len(form.count) <= 4 * 32


@settings(max_examples=80, deadline=None)
@given(stage_works(), st.data())
def test_rank_path_forms_are_cuts_the_longest_the_step_order(case, data):
    """The longest path through each rank: each at most the step order at its own work, the longest of them equal
    to it, and each a path of another work's graph of the same (schedule, ranks, m), so at most that step order."""
    from parplan.costmodel.schedules.step_order_bound import rank_path_forms
    schedule, work, m = case
    exact = step_order_s(schedule, work, m)
    forms = rank_path_forms(schedule, work, m)
    priced = [path_form_s(f, work) for f in forms]
    assert max(priced) == pytest.approx(exact, rel=1e-12)
    assert all(p <= exact * (1 + 1e-12) for p in priced)
    other = StageWork([c * data.draw(st.floats(0.5, 2.0)) for c in work.C], list(work.X), work.f, work.w,
                      [e * data.draw(st.floats(0.0, 2.0)) for e in work.E])
    other_exact = step_order_s(schedule, other, m)
    assert all(path_form_s(f, other) <= other_exact * (1 + 1e-12) for f in forms)
