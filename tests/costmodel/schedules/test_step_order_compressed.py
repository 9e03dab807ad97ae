"""The step order at any micro-batch count from its m-independent reference graph
(costmodel/schedules/step_order_compressed.py) against the full step order (costmodel/schedules/dualpipe_steps.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.costmodel.schedules.dualpipe_steps import StageWork, step_structure, step_order_s
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.schedules.step_order_compressed import compressed_step_s, reference_microbatches


@st.composite
def stage_works(draw):
    """(schedule, StageWork, m): 1-8 ranks, any legal m up to about 10 reference counts, lopsided stages, other
    time, forward and weight shares drawn."""
    schedule = draw(st.sampled_from([Schedule.DUALPIPE, Schedule.DUALPIPEV]))
    ranks = draw(st.sampled_from([2, 4, 6, 8])) if schedule is Schedule.DUALPIPE else draw(st.integers(1, 8))
    stages = ranks if schedule is Schedule.DUALPIPE else 2 * ranks
    step = 2 if schedule is Schedule.DUALPIPE else 1
    m = 2 * ranks + step * draw(st.integers(0, 10 * ranks))
    C = [draw(st.floats(0.05, 2.0)) * draw(st.sampled_from([1.0, 1.0, 0.3, 3.0])) for _ in range(stages)]
    X = [c * draw(st.sampled_from([0.0, 0.3, 0.8, 1.5, 3.0])) for c in C]
    E = [draw(st.floats(0.0, 0.5)) for _ in range(stages)]
    return schedule, StageWork(C, X, draw(st.sampled_from([0.25, 1 / 3, 0.5])), draw(st.sampled_from([0.0, 0.3, 0.5])),
                               E), m


@settings(max_examples=150, deadline=None)
@given(stage_works())
def test_compressed_step_is_the_step_order(case):
    schedule, work, m = case
    assert compressed_step_s(schedule, work, m) == pytest.approx(step_order_s(schedule, work, m), rel=1e-12)


def test_deepseek_shape_is_exact_and_its_graph_does_not_grow():
    """DualPipe on 32 ranks (DeepSeek-V3's research optimum's shape, a lopsided first stage): at 480 and 960
    micro-batches the reference graph (66 micro-batches, 4,130 operations against 17,378 at 480) gives the step
    order's step."""
    C = [0.3, 0.5, 0.5, 0.5] + [1.0] * 27 + [0.5]
    work = StageWork(C, [0.0] + [0.6] * 31, 1 / 3, 0.3, [0.05] * 32)
    m0, per = reference_microbatches(Schedule.DUALPIPE, 32)
    assert (m0, per) == (66, 2)
    for m in (480, 960):
        assert compressed_step_s(Schedule.DUALPIPE, work, m) == pytest.approx(step_order_s(Schedule.DUALPIPE, work, m),
                                                                              rel=1e-12)
    assert len(step_structure(Schedule.DUALPIPE, 32, m0).node) * 4 < len(step_structure(Schedule.DUALPIPE, 32, 480).node)


def test_undefined_step_order_is_refused():
    with pytest.raises(ValueError):
        compressed_step_s(Schedule.DUALPIPEV, StageWork([1.0] * 4, [0.0] * 4, 1 / 3, 0.0), 3)
