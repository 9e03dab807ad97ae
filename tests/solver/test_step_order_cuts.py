"""One paired choice under its step order by CP-SAT with path cuts (solver/step_order_cuts.py, over the lookups of
solver/step_order_lookups.py), against the enumeration of solver/step_order_search.py on tiny specs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from tests.solver.test_dualpipe_split import dualpipe_specs
from tests.solver.test_step_order_floor import SETTINGS, _paired_plans
from parplan.costmodel.evaluation.evaluate import paired_stage_work
from parplan.costmodel.evaluation.ledger import layer_classes, stage_totals
from parplan.costmodel.evaluation.prediction_band import with_memory_band
from parplan.costmodel.schedules.dualpipe_steps import step_order_s
from parplan.solver.completion import pinned_spec
from parplan.solver.problem import Problem
from parplan.solver.step_order_cuts import TOL, solve_paired_choice
from parplan.solver.step_order_lookups import build_lookups
from parplan.solver.step_order_search import objective_s, paired_choice_best


@settings(max_examples=20, **SETTINGS)
@given(spec=dualpipe_specs())
def test_lookups_rebuild_every_plans_work(spec):
    """At every plan of a paired choice (no recompute) the lookups give the evaluator's per-stage work, so the same
    step order."""
    seen = {}
    for problem, i, x, e in _paired_plans(spec):
        lk = seen.get(i) or seen.setdefault(i, build_lookups(problem, i))
        plan = e.plan
        if any(plan.recompute_layers):
            continue
        costs = problem.costs(i)
        classes = layer_classes(problem.spec, plan.stage_layers)
        totals = [stage_totals(costs, j, d, m, 0) for j, (d, m) in enumerate(classes)]
        ref = paired_stage_work(costs, problem.assumptions, classes, totals)
        got = lk.work(plan.stage_layers)
        for field in ("C", "X", "E"):
            assert np.allclose(getattr(got, field), getattr(ref, field), rtol=1e-12, atol=0), field
        assert step_order_s(plan.schedule, got, plan.num_microbatches) == pytest.approx(
            step_order_s(plan.schedule, ref, plan.num_microbatches), rel=1e-12)


class CutTally:
    exact = open = cuts = 0


@settings(max_examples=30, **SETTINGS)
@given(spec=dualpipe_specs())
def test_cut_solve_matches_enumeration(spec):
    """Where the cut loop closes (its answer's step order reaches the model's value) its plan is the enumeration's
    best of the choice; its bound is never above the enumeration's best."""
    problem = Problem.build(pinned_spec(with_memory_band(spec)))
    for i, c in enumerate(problem.choices):
        if not c.schedule.paired:
            continue
        ref = paired_choice_best(problem, i, float("inf"), None)
        out = solve_paired_choice(problem, i, problem.cap_kib)
        CutTally.cuts += out.cuts
        if ref is not None:
            assert out.bound_s <= objective_s(ref) * (1 + TOL), (c, out.bound_s, objective_s(ref))
        if not out.exact:
            CutTally.open += 1
            continue
        CutTally.exact += 1
        assert (out.best is None) == (ref is None), (c, ref, out.best)
        if ref is not None:
            assert objective_s(out.best) == pytest.approx(objective_s(ref), rel=TOL), (c, out.best.plan, ref.plan)
            assert out.best.feasible


def test_cut_examples_were_exercised():
    if CutTally.exact == 0:
        pytest.skip("run together with test_cut_solve_matches_enumeration")
    print(f"\nstep-order cuts: {CutTally.exact} choices closed, {CutTally.open} open, {CutTally.cuts} cuts added")
    assert CutTally.exact >= 30 and CutTally.cuts >= 10, vars(CutTally)
