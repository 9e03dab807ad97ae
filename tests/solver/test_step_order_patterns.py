"""A DualPipe choice by its units' layer totals, each pattern by the relaxation over every path
(solver/step_order_patterns.py), against the enumeration of every split and recompute vector on tiny specs (the branch
and bound given no nodes, so every choice it takes goes to the patterns)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.solver.test_dualpipe_split import dualpipe_specs
from tests.solver.test_step_order_floor import SETTINGS
from parplan.costmodel.evaluation.prediction_band import with_memory_band
from parplan.solver import step_order_branch, step_order_patterns
from parplan.solver.completion import pinned_spec
from parplan.solver.problem import Problem
from parplan.solver.step_order_branch import solve_dualpipe_choice, takes
from parplan.solver.step_order_patterns import CLOSE_UNITS, patterns
from parplan.solver.step_order_search import objective_s, paired_choice_best

REL = 1e-6


@settings(max_examples=40, **SETTINGS)
@given(tots=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=4), min_size=1, max_size=5),
       extra=st.integers(0, 6))
def test_patterns_are_every_vector_of_totals(tots, extra):
    layers = len(tots) + extra
    arrays = [np.asarray(t) for t in tots]
    want = sorted(v for v in itertools.product(*(sorted(set(t)) for t in tots)) if sum(v) == layers)
    got = patterns(arrays, layers)
    if len(want) > step_order_patterns.MAX_PATTERNS:
        assert got is None
    else:
        assert sorted(got) == want


class PatternTally:
    solved = found = 0


@settings(max_examples=30, **SETTINGS)
@given(spec=dualpipe_specs())
def test_patterns_match_enumeration(spec, monkeypatch):
    """Every DualPipe choice the branch and bound takes, solved by its patterns: exact, the enumeration's best
    objective within CLOSE_UNITS of the problem's time units (or none), a feasible plan, a bound at most the
    enumeration's best; the same below a threshold just above it, nothing below one just under it."""
    monkeypatch.setattr(step_order_branch, "MAX_NODES", 0)
    problem = Problem.build(pinned_spec(with_memory_band(spec)))
    slack = CLOSE_UNITS * problem.scale.time_unit_ns / 1e9
    for i, c in enumerate(problem.choices):
        if not c.schedule.paired or not takes(problem, i):
            continue
        ref = paired_choice_best(problem, i, float("inf"), None)
        out = solve_dualpipe_choice(problem, i, problem.cap_kib)
        assert out is not None and out.exact, c
        PatternTally.solved += 1
        assert (out.best is None) == (ref is None), (c, ref, out.best)
        if ref is None:
            continue
        PatternTally.found += 1
        assert out.best.feasible
        best, want = objective_s(out.best), objective_s(ref)
        assert want * (1 - REL) <= best <= want * (1 + REL) + slack, (c, out.best.plan, ref.plan)
        assert out.bound_s <= want * (1 + REL)
        near = solve_dualpipe_choice(problem, i, problem.cap_kib, below=want * (1 + 1e-5) + slack)
        assert near.exact and near.best is not None and objective_s(near.best) <= want * (1 + REL) + slack
        assert near.bound_s <= want * (1 + REL)
        above = solve_dualpipe_choice(problem, i, problem.cap_kib, below=want * (1 - 1e-6))
        assert above.exact and above.best is None


def test_pattern_examples_were_exercised():
    if PatternTally.solved == 0:
        pytest.skip("run together with test_patterns_match_enumeration")
    print(f"\nstep-order patterns: {PatternTally.solved} choices, {PatternTally.found} with a plan")
    assert PatternTally.found >= 10, vars(PatternTally)
