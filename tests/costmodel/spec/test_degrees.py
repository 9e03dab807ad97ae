"""costmodel/spec/degrees.py: Choice.but copies a choice with some fields changed and refuses a name that is no field."""

from __future__ import annotations

import dataclasses

import pytest

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.degrees import Choice


def test_but_is_dataclasses_replace():
    c = Choice(tp=2, cp=1, pp=4, dp=2, micro_batch_size=2, num_microbatches=8, vpp=2, schedule=Schedule.INTERLEAVED)
    changes = {"schedule": Schedule.ONE_F_ONE_B, "vpp": 1, "num_microbatches": 1}
    d = c.but(**changes)
    assert d == dataclasses.replace(c, **changes) and hash(d) == hash(dataclasses.replace(c, **changes))
    assert c.vpp == 2 and c.schedule is Schedule.INTERLEAVED  # the original unchanged
    assert list(vars(d)) == list(vars(c))  # every field, in the declaration's order


def test_but_refuses_a_name_that_is_no_field():
    c = Choice(tp=1, cp=1, pp=1, dp=1)
    with pytest.raises(TypeError, match="no field"):
        c.but(tp=2, pipeline_parallel=2)
