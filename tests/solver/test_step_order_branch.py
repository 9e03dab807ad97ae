"""One DualPipe choice under its step order by branch and bound over its rank pairs (solver/step_order_branch.py),
against the enumeration of every split and recompute vector (solver/step_order_search.py) on tiny specs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from tests.solver.test_dualpipe_split import dualpipe_specs
from tests.solver.test_step_order_floor import SETTINGS, _paired_plans
from parplan.costmodel.schedules.dualpipe_steps import step_order_s
from parplan.costmodel.schedules.step_order_bound import critical_path_form, path_form_s, rank_path_forms
from parplan.costmodel.evaluation.prediction_band import with_memory_band
from parplan.solver.completion import pinned_spec
from parplan.solver.problem import Problem
from parplan.solver.step_order_branch import _features, cut_coefficients, solve_dualpipe_choice, takes
from parplan.solver.step_order_critical import critical_path
from parplan.solver.step_order_lookups import build_lookups
from parplan.solver.step_order_search import objective_s, paired_choice_best

REL = 1e-9


@settings(max_examples=20, **SETTINGS)
@given(spec=dualpipe_specs())
def test_unit_prices_sum_to_the_paths_length(spec):
    """A path's price summed over the units (each unit's coefficients times its features) is the path's length
    priced over the plan's work (costmodel path_form_s), recompute included."""
    seen, checked = {}, 0
    for problem, i, x, e in _paired_plans(spec):
        c = problem.choices[i]
        if c.schedule.value != "dualpipe":
            continue
        lk = seen.get(i) or seen.setdefault(i, build_lookups(problem, i))
        layers = list(e.plan.stage_layers)
        for rec in ([0] * c.pp, [x // 2 for x in layers]):  # without recompute, and half the layers recomputed
            work = lk.work(layers, rec)
            forms = rank_path_forms(c.schedule, work, c.num_microbatches)
            total = np.zeros(len(forms))
            for u in range(c.pp // 2):
                a, b = u, c.pp - 1 - u
                ar = lambda v: np.array([v])  # noqa: E731
                feats = _features(lk, a, b, ar(layers[a]), ar(layers[b]), ar(rec[a]), ar(rec[b]))
                total += (cut_coefficients(lk, forms, u) @ feats)[:, 0]
            for f, v in zip(forms, total):
                assert v == pytest.approx(path_form_s(f, work), rel=1e-12)
        checked += 1
    assert checked or not any(p.choices[i].schedule.value == "dualpipe" for p, i, _, _ in _paired_plans(spec))


class BranchTally:
    solved = found = cuts = 0


@settings(max_examples=60, **SETTINGS)
@given(spec=dualpipe_specs())
def test_branch_and_bound_matches_enumeration(spec):
    """Every DualPipe choice it takes: exact, the enumeration's best objective (or none), a feasible plan; below a
    threshold just above the optimum the optimum (the linear relaxation, solver/step_order_lp.py, and the options'
    busy-floor filter keep it), none below one just under it."""
    problem = Problem.build(pinned_spec(with_memory_band(spec)))
    for i, c in enumerate(problem.choices):
        if not c.schedule.paired or not takes(problem, i):
            continue
        ref = paired_choice_best(problem, i, float("inf"), None)
        out = solve_dualpipe_choice(problem, i, problem.cap_kib)
        assert out is not None and out.exact, c
        BranchTally.solved += 1
        BranchTally.cuts += out.cuts
        assert (out.best is None) == (ref is None), (c, ref, out.best)
        if ref is None:
            continue
        BranchTally.found += 1
        assert out.best.feasible
        assert objective_s(out.best) == pytest.approx(objective_s(ref), rel=REL), (c, out.best.plan, ref.plan)
        assert out.bound_s == objective_s(out.best)
        above = solve_dualpipe_choice(problem, i, problem.cap_kib, below=objective_s(ref) * (1 - 1e-6))
        assert above.exact and above.best is None
        near = solve_dualpipe_choice(problem, i, problem.cap_kib, below=objective_s(ref) * (1 + 1e-6))
        assert near.exact and objective_s(near.best) == pytest.approx(objective_s(ref), rel=REL)  # (the relaxation
        #   and the option filter at a threshold just above the optimum keep it)


def test_branch_examples_were_exercised():
    if BranchTally.solved == 0:
        pytest.skip("run together with test_branch_and_bound_matches_enumeration")
    print(f"\nstep-order branch and bound: {BranchTally.solved} choices, {BranchTally.found} with a plan, "
          f"{BranchTally.cuts} cuts added")
    assert BranchTally.found >= 15 and BranchTally.cuts >= 5, vars(BranchTally)


@settings(max_examples=20, **SETTINGS)
@given(spec=dualpipe_specs())
def test_critical_path_is_the_step_order_and_its_path(spec):
    """critical_path gives step_order_s's value and critical_path_form's path, at every plan of a DualPipe choice."""
    seen = 0
    for problem, i, x, e in _paired_plans(spec, limit=10):
        c = problem.choices[i]
        if c.schedule.value != "dualpipe":
            continue
        work = build_lookups(problem, i).work(list(e.plan.stage_layers))
        value, form = critical_path(c.schedule, work, c.num_microbatches)
        assert value == step_order_s(c.schedule, work, c.num_microbatches)
        ref = critical_path_form(c.schedule, work, c.num_microbatches)
        for field in ("kind", "stage", "stage_b", "zb", "count"):
            assert np.array_equal(getattr(form, field), getattr(ref, field)), field
        seen += 1
    assert seen or not any(p.choices[i].schedule.value == "dualpipe" for p, i, _, _ in _paired_plans(spec, limit=1))
