"""solver/paired_split.py: the DualPipe exposure table built for every rank at once equals the rank-by-rank one
(``ChoiceCosts.rank_exposed_s`` per rank and split) integer for integer, with and without every split's exposure and
under the even split, on DeepSeek-V3's DualPipe choices (benchmarks/solver_speed.py) of every PP degree."""

from __future__ import annotations

import random

import numpy as np
import pytest

from benchmarks.solver_speed import SCENARIOS
from parplan.frameworks.loader import validate_spec
from parplan.solver.paired_split import dualpipe_exposure_table, exposure_table_by_rank, paired_exposure_table
from parplan.solver.problem import Problem
from parplan.solver.tables import schedule_units


@pytest.fixture(scope="module")
def dsv3() -> Problem:
    return Problem.build(validate_spec(dict(SCENARIOS)["DeepSeek-V3 671B / 2048 H800, 4K"]))


def test_every_rank_at_once_equals_rank_by_rank(dsv3):
    p = dsv3
    k = p.spec.model.moe.first_dense_layers
    dual = [i for i in p.order(p.cap_kib) if p.choices[i].schedule == "dualpipe"]
    by_pp: dict[int, list[int]] = {}
    for i in random.Random(5).sample(dual, len(dual)):
        by_pp.setdefault(p.choices[i].pp, []).append(i)
    picked = [i for ids in by_pp.values() for i in ids[:4]]
    assert len(by_pp) >= 3 and len(picked) >= 12
    unit_ns = p.scale.time_unit_ns
    for i in picked:
        costs = p.costs(i)
        pipe = schedule_units(costs.choice.schedule, costs.choice.pp)
        for even in (False, True):
            for every in (False, True):
                want = exposure_table_by_rank(costs, pipe, p.num_layers, k, even, unit_ns, every)
                got = dualpipe_exposure_table(costs, pipe.count, p.num_layers, k, even, unit_ns, every)
                assert paired_exposure_table(costs, pipe, p.num_layers, k, even, unit_ns, every)[0] is not None
                for w, g in zip(want, got):
                    if w is None:
                        assert g is None
                    else:
                        assert w.dtype == g.dtype == np.int64 and w.shape == g.shape
                        assert np.array_equal(w, g), (costs.choice, even, every)


def test_a_table_past_the_size_limit_is_built_rank_by_rank(dsv3, monkeypatch):
    """Past VECTOR_TABLE_MAX entries (ranks x (L+1)^2) paired_exposure_table builds rank by rank, not all ranks at
    once: the same table, without the all-rank arrays."""
    from parplan.solver import paired_split

    p = dsv3
    k = p.spec.model.moe.first_dense_layers
    i = next(i for i in p.order(p.cap_kib) if p.choices[i].schedule == "dualpipe")
    costs = p.costs(i)
    pipe = schedule_units(costs.choice.schedule, costs.choice.pp)
    want = paired_exposure_table(costs, pipe, p.num_layers, k, False, p.scale.time_unit_ns, True)
    monkeypatch.setattr(paired_split, "VECTOR_TABLE_MAX", 0)
    monkeypatch.setattr(paired_split, "dualpipe_exposure_table", lambda *a, **kw: pytest.fail("built all at once"))
    got = paired_split.paired_exposure_table(costs, pipe, p.num_layers, k, False, p.scale.time_unit_ns, True)
    assert all(np.array_equal(w, g) for w, g in zip(want, got))
