"""The busy floor of the step order and the closed form's bounds weakened to it (solver/step_order_floor.py), over
every plan of the paired choices of tiny MoE specs; and, as a strict xfail until issue 39 item 1 is done, the
planner's DualPipe / DualPipeV answers under the step order (tests/brute_force.py with
:func:`~tests.brute_force.step_order_or_closed_s`)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, assume, given, settings

from tests.brute_force import brute_force, compositions, step_order_or_closed_s
from tests.conftest import spec_repr
from tests.solver.test_dualpipe_split import dualpipe_specs
from tests.solver_checks import CPSAT, REL_TOL
from parplan.costmodel.evaluation.legality import stage_violations
from parplan.solver.assignment_check import assignment_violations, evaluate_assignment
from parplan.solver.planner import optimize
from parplan.solver.problem import Problem, assignment_of
from parplan.solver.step_order_floor import busy_mean_bound, floor_divisor, floor_table

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
FLOOR_TOL = 1e-5  # the tables' integer times against the float evaluator (per-layer coefficients rounded to units)
HUGE_CAP = 1 << 50  # structure only: memory is not what these bounds are about


def _paired_plans(spec, limit: int = 40):
    """(problem, choice, assignment, evaluation) of every paired choice's plans without recompute, each stage split
    (the first ``limit`` per choice) that the choice's table holds."""
    problem = Problem.build(spec)
    for i, c in enumerate(problem.choices):
        if not c.schedule.paired:
            continue
        t = problem.table(i)
        for layers in itertools.islice(compositions(spec.model.num_layers, c.pp), limit):
            if stage_violations(spec, c, layers, [0] * c.pp):
                continue
            x = assignment_of(t, layers, [0] * c.pp)
            if assignment_violations(t, x, HUGE_CAP):
                continue
            e = problem.evaluation(i, x)
            if e.metrics.step_order_step_s is not None:
                yield problem, i, x, e


class FloorTally:
    plans = exact = above = 0


@settings(max_examples=25, **SETTINGS)
@given(spec=dualpipe_specs())
def test_busy_floor_is_below_the_step_order_of_every_plan(spec):
    """At every plan of a paired choice the floor table's U (m·t_max + dp) is at most its step order, equal where
    no rank has a fill (DualPipe on 2 ranks); the choice's closed-form bounds divided by ``floor_divisor`` and the
    relaxation of its busy floor (Problem.relaxed_bound with ``floor``) and its mean busy floor (``busy_mean_bound``)
    are below the step order of each of its plans. Also counts where the closed-form bound alone is above a plan's step
    order (:func:`test_floor_examples_were_exercised`)."""
    for problem, i, x, e in _paired_plans(spec):
        t = problem.table(i)
        floor_s = problem.scale.seconds(evaluate_assignment(floor_table(t), x)[0])
        by_order = e.metrics.step_order_step_s
        assert floor_s <= by_order * (1 + FLOOR_TOL), (spec_repr(spec), e.plan)
        if t.choice.schedule.value == "dualpipe" and t.choice.pp == 2:
            assert floor_s == pytest.approx(by_order, rel=FLOOR_TOL)
            FloorTally.exact += 1
        bound_s = problem.scale.seconds(max(float(problem.quick_lb[i]), problem.relaxed_bound(i, HUGE_CAP),
                                            problem.mean_bound(i)))
        assert bound_s / floor_divisor(t.choice, problem.assumptions) <= by_order * (1 + FLOOR_TOL)
        floor_relaxed = problem.scale.seconds(problem.relaxed_bound(i, HUGE_CAP, floor=True))
        assert floor_relaxed <= floor_s * (1 + FLOOR_TOL)
        assert problem.scale.seconds(busy_mean_bound(problem, i)) <= floor_s * (1 + FLOOR_TOL)
        FloorTally.plans += 1
        FloorTally.above += bound_s > by_order * (1 + FLOOR_TOL)


def test_floor_examples_were_exercised():
    """Not vacuous: the draws above checked paired plans, some of them at pp 2 (run in the same session)."""
    if FloorTally.plans == 0:
        pytest.skip("run together with test_busy_floor_is_below_the_step_order_of_every_plan")
    print(f"\nstep-order floor: {FloorTally.plans} plans, {FloorTally.exact} exact (pp 2), "
          f"{FloorTally.above} below their choice's closed-form bound")
    assert FloorTally.plans >= 50 and FloorTally.exact >= 10, vars(FloorTally)


@pytest.mark.xfail(strict=True, reason=(
    "issue 39 item 1 not done: the search optimizes the closed form, which is not the step order for DualPipe / "
    "DualPipeV on 4 or more ranks (it prices the fill and drain by Table 2's bubble over rank rows), so a returned "
    "paired plan's objective is not its step order and a plan of shorter step order can exist"))
@settings(max_examples=20, **SETTINGS)
@given(spec=dualpipe_specs())
def test_paired_answer_is_optimal_under_the_step_order(no_explanations, spec):
    """The acceptance of issue 39 item 1 on tiny specs: the answer's objective is its step order, and no plan of
    the space has a step order shorter by 0.1 % (brute force under the step order)."""
    res = optimize(spec, method="cpsat", top_k=1, controls=CPSAT)
    assume(res.plans)
    best = res.plans[0]
    value = step_order_or_closed_s(best)
    assert res.stats.objective_value == pytest.approx(value, rel=REL_TOL), (spec_repr(spec), best.plan)
    found = brute_force(spec, value * (1 - REL_TOL), objective=step_order_or_closed_s)
    assert found is None, (spec_repr(spec), best.plan, found.plan, step_order_or_closed_s(found))
