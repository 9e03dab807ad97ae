"""costmodel/schedules/schedule.py: what the schedules' bubbles read (the keys of the caches that hold them)."""

from __future__ import annotations

import pytest

from parplan.costmodel.schedules.schedule import Schedule


@pytest.mark.parametrize("schedule", list(Schedule))
def test_reads_weight_grad_says_exactly_whether_the_bubble_reads_w(schedule):
    """bubble_time with another W: the same float for every pp and vpp where the schedule does not read W
    (costmodel/evaluation/choice.py bubble_factor then leaves the weight-gradient share out of its key), another
    for some pp where it does (so dropping the share from the key would serve a wrong bubble)."""
    F, B = 1 / 3, 2 / 3
    vpps = (1, 2, 4) if schedule is Schedule.INTERLEAVED else (1,)
    differs = [schedule.bubble_time(pp, F, B, 0.0, None, v) != schedule.bubble_time(pp, F, B, W, None, v)
               for pp in (1, 2, 4, 8, 16) for v in vpps for W in (0.05, 0.2, 0.3)]
    assert any(differs) == schedule.reads_weight_grad
