"""One paired choice under its step order by CP-SAT with path cuts (solver/step_order_cuts.py, over the lookups of
solver/step_order_lookups.py), against the enumeration of solver/step_order_search.py on tiny specs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings

from tests.solver.test_dualpipe_split import dualpipe_specs
from tests.solver.test_step_order_floor import SETTINGS, _paired_plans
from parplan.costmodel.evaluation.evaluate import paired_stage_work
from parplan.costmodel.evaluation.ledger import layer_classes, stage_totals
from parplan.costmodel.evaluation.prediction_band import with_memory_band
from parplan.costmodel.schedules.dualpipe_steps import step_order_s
from parplan.frameworks.loader import validate_spec
from parplan.solver import step_order_cuts
from parplan.solver.completion import pinned_spec
from parplan.solver.cpsat_stopper import STOPPER
from parplan.solver.deadline import TimeUp, call_limits
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


def _dualpipe_choice() -> tuple[Problem, int]:
    """A 4-stage DualPipe choice of a tiny MoE model (tests/solver/test_dualpipe_split.py's kind of spec)."""
    model = dict(name="tiny-moe", num_layers=6, hidden_size=1024, ffn_hidden_size=2048, num_attention_heads=8,
                 vocab_size=5000, gated_mlp=True, tie_embeddings=False,
                 moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, first_dense_layers=1))
    search = dict(schedules=["dualpipe"], micro_batch_size=[1], pp=[4], tp=[1], ep=[2], uneven_stages=True,
                  recompute=["none"], zero_stages=[1])
    spec = validate_spec(dict(framework="any", model=model, search=search,
                              cluster=dict(gpu="H100-SXM-80GB", num_gpus=8, gpus_per_node=1),
                              training=dict(seq_len=1024, global_batch_size=32)))
    problem = Problem.build(pinned_spec(with_memory_band(spec)))
    return problem, next(i for i, c in enumerate(problem.choices) if c.schedule.paired)


def test_cut_loop_solves_are_watched_to_the_earlier_deadline(monkeypatch):
    """Every CP-SAT solve of the loop is watched by the project's stopper (solver/cpsat_stopper.py) with the earlier
    of the loop's deadline and the call's."""
    problem, i = _dualpipe_choice()
    watched = []
    real = STOPPER.watch
    monkeypatch.setattr(STOPPER, "watch", lambda s, c, lim, d=None: watched.append(d) or real(s, c, lim, d))
    t0 = time.perf_counter()
    for own, call, want in ((t0 + 50, t0 + 100, t0 + 50), (t0 + 200, t0 + 100, t0 + 100), (None, None, None)):
        watched.clear()
        with call_limits(call):
            solve_paired_choice(problem, i, problem.cap_kib, deadline=own)
        assert watched and all(d == want for d in watched), (own, call, watched)


@pytest.mark.parametrize("how", ["deadline", "cancel"])
def test_cut_loop_ends_inside_its_deadline(monkeypatch, how):
    """A deadline that passes (or a cancel that lands) during the loop's evaluation of an answer ends the loop there:
    TimeUp, no cut added and no solve started after it (what overran a 120 s limit by 0.45 s: the rank paths and the
    next evaluation ran past it)."""
    problem, i = _dualpipe_choice()
    cancel, paths, deadline = threading.Event(), [], time.perf_counter() + 5.0
    real = problem.evaluate

    def slow(plan):
        if how == "cancel":
            cancel.set()
        else:
            time.sleep(max(0.0, deadline - time.perf_counter()) + 0.01)
        return real(plan)

    monkeypatch.setattr(problem, "evaluate", slow)
    monkeypatch.setattr(step_order_cuts, "rank_paths", lambda *a: paths.append(a) or [])
    with call_limits(None, cancel):
        with pytest.raises(TimeUp):
            solve_paired_choice(problem, i, problem.cap_kib, deadline=deadline)
    assert not paths
    if how == "deadline":
        assert time.perf_counter() - deadline < 0.5
