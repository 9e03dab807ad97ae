"""solver/tables.py: stage_inflight is inflight_microbatches of every stage, kept by all that it reads of a choice."""

from __future__ import annotations

import itertools

from parplan.costmodel.evaluation.choice import inflight_microbatches
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.degrees import Choice
from parplan.solver import tables
from parplan.solver.tables import stage_inflight


def _choices():
    """Choices of every schedule at several pp, vpp and micro-batch counts, with and without the all-to-all overlap."""
    for schedule, pp, m, overlap in itertools.product(list(Schedule), (1, 2, 3, 4, 8), (1, 2, 4, 7, 16, 64),
                                                      (False, True)):
        for vpp in ((2, 3) if schedule is Schedule.INTERLEAVED else (1,)):
            yield Choice(tp=2, cp=1, pp=pp, dp=1, ep=2 if overlap else 1, micro_batch_size=1, num_microbatches=m,
                         vpp=vpp, schedule=schedule, moe_a2a_overlap=overlap)


def test_stage_inflight_is_every_stages_count_whatever_the_other_fields():
    tables._INFLIGHT.clear()
    for c in _choices():
        own = tuple(inflight_microbatches(c, s) for s in range(c.pp))
        assert stage_inflight(c) == own
        # another choice of the same schedule, pp, vpp, m and overlap reads the kept answer: its own is the same
        other = c.but(tp=4, dp=8, micro_batch_size=4, recompute="full", zero_stage=3, first_chunk_trim=1)
        assert stage_inflight(other) == own == tuple(inflight_microbatches(other, s) for s in range(c.pp))


def test_the_cache_is_bounded():
    tables._INFLIGHT.clear()
    before = tables.INFLIGHT_CACHE_MAX
    tables.INFLIGHT_CACHE_MAX = 4
    try:
        for c in itertools.islice(_choices(), 20):
            stage_inflight(c)
            assert len(tables._INFLIGHT) <= 4
        long = Choice(tp=1, cp=1, pp=tables.INFLIGHT_CACHE_STAGES + 1, dp=1, num_microbatches=1024)
        n = len(tables._INFLIGHT)
        assert len(stage_inflight(long)) == long.pp and len(tables._INFLIGHT) == n  # computed, not kept
    finally:
        tables.INFLIGHT_CACHE_MAX = before
        tables._INFLIGHT.clear()
