"""solver/step_order_critical.py's rank paths level by level: the same forms as step_order_bound's
``rank_path_forms`` (the critical path's own test is tests/solver/test_step_order_branch.py's
``test_critical_path_is_the_step_order_and_its_path``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan.costmodel.schedules.dualpipe_steps import StageWork
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.schedules.step_order_bound import rank_path_forms
from parplan.solver.step_order_critical import rank_paths
from tests.solver.test_step_order_floor import SETTINGS


@st.composite
def works(draw):
    """A step order (DualPipe on 2-8 ranks, DualPipeV on 1-4) and per-stage work, with ties (durations drawn from a
    few values) so the tie rules are exercised."""
    dual = draw(st.booleans())
    ranks = draw(st.sampled_from([2, 4, 6, 8])) if dual else draw(st.integers(1, 4))
    stages = ranks if dual else 2 * ranks
    m = draw(st.integers(ranks, 3 * ranks)) * 2
    pick = st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0]), min_size=stages, max_size=stages)
    work = StageWork(draw(pick), draw(pick), draw(st.sampled_from([0.33, 0.5])), draw(st.sampled_from([0.0, 0.2])),
                     draw(pick))
    return (Schedule.DUALPIPE if dual else Schedule.DUALPIPEV), work, m


@settings(max_examples=60, **SETTINGS)
@given(case=works())
def test_rank_paths_are_rank_path_forms(case):
    schedule, work, m = case
    got, ref = rank_paths(schedule, work, m), rank_path_forms(schedule, work, m)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        for field in ("kind", "stage", "stage_b", "zb", "count"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
