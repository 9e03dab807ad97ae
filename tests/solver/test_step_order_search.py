"""The search under the step order (solver/step_order_search.py) on tiny specs: CP-SAT = the oracle = brute force
under the objective (tests/brute_force.py with :func:`~tests.brute_force.step_order_or_closed_s`), every returned
plan's objective its step order (paired) or its closed form, OPTIMAL meaning no plan of the space is better."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.brute_force import brute_force, step_order_or_closed_s
from tests.conftest import spec_repr
from tests.solver.test_dualpipe_split import dualpipe_specs
from tests.solver.test_step_order_floor import SETTINGS
from tests.solver_checks import CPSAT, REL_TOL, check_plan
from parplan.costmodel.evaluation.prediction_band import with_memory_band
from parplan.frameworks.loader import validate_spec
from parplan.solver.completion import pinned_spec
from parplan.solver.deadline import call_limits
from parplan.solver.problem import Problem
from parplan.solver.search import Searcher
from parplan.solver.step_order_search import best_by_step_order, objective_s


def _search(spec, method: str, k: int = 1):
    spec = pinned_spec(with_memory_band(spec))  # as the planner reads it
    with call_limits(None, None, None):
        problem = Problem.build(spec)
        return best_by_step_order(Searcher(problem, method, CPSAT), problem.cap_kib, k)


@st.composite
def mixed_specs(draw):
    """:func:`dualpipe_specs`, half of them with 1F1B and ZB-H1 searched beside the paired schedule (the first
    part's pruning and the K-th best raised by a paired plan's step order)."""
    spec = draw(dualpipe_specs())
    if not draw(st.booleans()):
        return spec
    raw = spec.model_dump(mode="json", exclude_unset=True)
    raw["search"]["schedules"] = list(raw["search"]["schedules"]) + ["1f1b", "zb-h1"]
    return validate_spec(raw)


class Tally:
    feasible = paired = differs = solved = other = 0


@settings(max_examples=30, **SETTINGS)
@given(spec=mixed_specs())
def test_step_order_search_matches_brute_force(spec):
    """CP-SAT and the oracle (the closed-form part) give the same objectives; OPTIMAL or INFEASIBLE; each plan
    legal and fitting, its objective its step order; and no plan of the space is better by 0.1 % (brute force
    under the objective; INFEASIBLE only where nothing fits)."""
    cp, ex = _search(spec, "cpsat", 2), _search(spec, "exhaustive", 2)
    label = spec_repr(spec)
    assert cp.status in ("OPTIMAL", "INFEASIBLE") and ex.status == cp.status, (label, cp.status, ex.status)
    assert [round(objective_s(e), 9) for e in cp.plans] == pytest.approx(
        [round(objective_s(e), 9) for e in ex.plans], rel=REL_TOL), label
    below = None
    if cp.plans:
        best = cp.plans[0]
        check_plan(spec, best)
        assert objective_s(best) == step_order_or_closed_s(best)
        assert cp.bound_s == objective_s(best)
        below = objective_s(best) * (1 - REL_TOL)
        Tally.feasible += 1
        Tally.paired += best.metrics.step_order_step_s is not None
        Tally.differs += best.metrics.step_order_step_s not in (None, best.metrics.step_time_s)
        Tally.solved += cp.paired_solved
        Tally.other += best.metrics.step_order_step_s is None
    found = brute_force(spec, below, objective=step_order_or_closed_s)
    assert found is None, (label, cp.plans[0].plan if cp.plans else None, found.plan, step_order_or_closed_s(found))


def test_step_order_search_examples_were_exercised():
    """Not vacuous: the draws above found paired plans whose step order is not their closed form (same session)."""
    if Tally.feasible == 0:
        pytest.skip("run together with test_step_order_search_matches_brute_force")
    print(f"\nstep-order search: {Tally.feasible} feasible, {Tally.paired} paired answers, {Tally.differs} of them "
          f"off their closed form, {Tally.other} other, {Tally.solved} paired choices solved")
    assert Tally.feasible >= 10 and Tally.differs >= 5 and Tally.other >= 2, vars(Tally)


def test_step_order_search_is_deterministic():
    """The same answer twice (each cut loop's CP-SAT solve is capped in deterministic time, one worker, fixed
    seed): a 6-layer MoE model on 8 GPUs, DualPipe at pp 2 and 4 beside 1F1B, memory-bound (recompute)."""
    from tests.solver.test_dualpipe_split import validate_spec as _validate
    spec = _validate(dict(
        framework="any",
        model=dict(name="tiny-moe", num_layers=6, hidden_size=1024, ffn_hidden_size=2048, num_attention_heads=8,
                   vocab_size=5844, gated_mlp=True, tie_embeddings=False,
                   moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, first_dense_layers=1)),
        training=dict(seq_len=1024, global_batch_size=32),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=8, gpus_per_node=2, memory_gib=3.0),
        search=dict(tp=[1], pp=[2, 4], ep=[2, 4], micro_batch_size=[1], schedules=["dualpipe", "1f1b"],
                    uneven_stages=True, zero_stages=[1], recompute=["none", "full"])))
    runs = [_search(spec, "cpsat", 3) for _ in range(2)]
    dumps = [[e.model_dump(mode="json") for e in r.plans] + [r.status, r.bound_s] for r in runs]
    assert dumps[0] == dumps[1]
    assert runs[0].plans, runs[0].status


def test_mixtral_research_space_optimum_is_the_step_order_optimum():
    """Issue 39's Mixtral acceptance: Mixtral 8x7B on 64 H100 in the research space
    (tests/solver/test_dualpipe_split.py's spec). The planner's optimum, which ranks DualPipe by its closed form,
    is the step-order search's OPTIMAL answer: the same objective, and no plan's step order is shorter."""
    from parplan.solver.planner import optimize
    from tests.solver.test_dualpipe_split import _mixtral_spec

    spec = _mixtral_spec()
    planned = optimize(spec, controls=CPSAT)
    by_order = _search(spec, "cpsat")
    assert planned.status == "OPTIMAL" and by_order.status == "OPTIMAL"
    best, proven = planned.plans[0], by_order.plans[0]
    assert objective_s(best) == pytest.approx(objective_s(proven), rel=REL_TOL)
    assert best.plan == proven.plan, (best.plan, proven.plan)
