"""costmodel/schedules/dualpipe_steps.py and the evaluator's step-order step (``Metrics.step_order_step_s``): the longest
path through the upstream step orders equals tests/dualpipe_sim.py's list schedule (a second coding) with other
time per stage, and on DualPipe / DualPipeV plans the evaluator's per-stage work reproduces the closed form's rank
rows exactly (each rank's busy time in the step order is m x its row) while the step adds what the order makes
the ranks wait."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import moe_schedule_cases as moe_dims
from tests.dualpipe_sim import simulate_dualpipe, simulate_dualpipev
from tests.solver.test_dualpipe_split import _dsv3, _dsv3_plan, _mixtral_plan
from parplan.costmodel.schedules.schedule import Schedule
from parplan.library.contract import metrics_to_dict
from parplan.costmodel.schedules import dualpipev
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import choice_costs
from parplan.costmodel.schedules.dualpipe_steps import StageWork, step_order_s
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.evaluation.ledger import layer_classes, stage_totals
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.spec import PlanSpec


@st.composite
def stage_work(draw):
    schedule = draw(st.sampled_from([Schedule.DUALPIPE, Schedule.DUALPIPEV]))
    ranks = draw(st.sampled_from([2, 4, 6]))
    stages = ranks if schedule is Schedule.DUALPIPE else 2 * ranks
    m = 2 * ranks * draw(st.integers(1, 3))
    C = [draw(st.floats(0.1, 2.0)) for _ in range(stages)]
    X = [c * draw(st.sampled_from([0.0, 0.5, 1.5, 3.0])) for c in C]
    E = [draw(st.floats(0.0, 1.0)) for _ in range(stages)]
    return schedule, StageWork(C, X, draw(st.sampled_from([1 / 3, 0.4])), draw(st.sampled_from([0.0, 0.3])), E), m


@settings(max_examples=60, deadline=None, derandomize=True)
@given(stage_work())
def test_longest_path_is_the_list_schedule(case):
    """Two codings of the same step orders agree, other time per stage included: the graph's longest path
    (costmodel) and the rank-by-rank list schedule with micro-batch counters (tests/dualpipe_sim.py)."""
    schedule, w, m = case
    simulate = simulate_dualpipe if schedule is Schedule.DUALPIPE else simulate_dualpipev
    assert step_order_s(schedule, w, m) == pytest.approx(simulate(w.C, w.X, m, w.f, w.w, w.E).step_s, rel=1e-12)


def _by_hand_work(spec, ev):
    """The plan's per-stage work composed here from the ledger's pieces (layer classes, stage totals, the
    choice's chunk work): C the layers' compute, X their all-to-all, E the rest of the stage's time; a DualPipeV
    rank split into its chunks as costmodel/schedules/dualpipev.py chunk_split does, its embedding on chunk 0 and its head
    on chunk 1, the rest by layers."""
    a = resolve_assumptions(spec.assumptions)
    plan = ev.plan
    costs = choice_costs(spec, plan.to_choice(), resolve_gpu(spec.cluster), a)
    classes = layer_classes(spec, plan.stage_layers)
    totals = [stage_totals(costs, i, d, e, r).time_s
              for i, ((d, e), r) in enumerate(zip(classes, plan.recompute_layers))]
    if plan.schedule is Schedule.DUALPIPE:
        chunks = [costs.chunk_work(d, e) for d, e in classes]
        C = [k.compute_s for k in chunks]
        return costs, a, C, [k.a2a_s for k in chunks], [t - c for t, c in zip(totals, C)], _attention(chunks, costs)
    P = plan.pp
    C, X, E = [0.0] * (2 * P), [0.0] * (2 * P), [0.0] * (2 * P)
    chunks: list = [None] * (2 * P)
    for r, ((d, e), total) in enumerate(zip(classes, totals)):
        first, second = dualpipev.chunk_split(d + e, d)
        d0 = min(d, first)
        k0, k1 = costs.chunk_work(d0, first - d0), costs.chunk_work(d - d0, e - (first - d0))
        ends = (costs.first_extra_time_s, costs.last_extra_time_s) if r == 0 else (0.0, 0.0)
        rest = total - k0.compute_s - k1.compute_s - sum(ends)
        C[r], X[r], E[r] = k0.compute_s, k0.a2a_s, rest * first / (d + e) + ends[0]
        C[2 * P - 1 - r], X[2 * P - 1 - r], E[2 * P - 1 - r] = k1.compute_s, k1.a2a_s, rest * second / (d + e) + ends[1]
        chunks[r], chunks[2 * P - 1 - r] = k0, k1
    return costs, a, C, X, E, _attention(chunks, costs)


def _attention(chunks, costs) -> tuple[list[float] | None, float]:
    """(attention time per stage, the MoE layer's dispatch share of each pass's all-to-all) for per-component
    pairs; (None, 0.5) where a chunk has no attention time or the model no MoE layer (pairs per chunk)."""
    if costs.moe is None or any(k.attn_s is None for k in chunks):
        return None, 0.5
    return [k.attn_s for k in chunks], costs.moe.dispatch_share


PAIRED_PLANS = {
    "dsv3 dualpipe lopsided": lambda: (_dsv3(), _dsv3_plan([3, 16, 15, 27])),
    "dsv3 dualpipe balanced": lambda: (_dsv3(), _dsv3_plan([15, 16, 15, 15])),
    "mixtral dualpipe": lambda: _mixtral_plan("dualpipe"),
    "mixtral dualpipev": lambda: (_mixtral_plan("dualpipe")[0],
                                  PlanSpec(tp=2, pp=4, dp=8, ep=8, schedule="dualpipev", micro_batch_size=1,
                                           num_microbatches=64)),
    "dense dualpipe": lambda: (moe_dims.spec(), PlanSpec(pp=4, dp=2, schedule="dualpipe", num_microbatches=16)),
    "moe dualpipev recompute": lambda: (moe_dims.spec(moe_dims.MOE, gpus=8),
                                        PlanSpec(pp=2, dp=4, ep=4, schedule="dualpipev", num_microbatches=8,
                                                 recompute="full")),
}


@pytest.mark.parametrize("name", sorted(PAIRED_PLANS))
def test_evaluator_step_order_is_its_rank_rows_in_the_upstream_order(name):
    """On DualPipe and DualPipeV plans the evaluator's step-order step is the list schedule over the per-stage
    work composed by hand from the ledger, plus the exposed DP term; each rank's busy time in that schedule is m
    times the closed form's rank row (the evaluator's ``time_per_microbatch_s``: both stages' time, the exposed
    all-to-all); and the step is at least the busiest rank's."""
    spec, plan_spec = PAIRED_PLANS[name]()
    ev = evaluate(spec, plan_spec)
    costs, a, C, X, E, (A, dispatch_share) = _by_hand_work(spec, ev)
    m, f = ev.plan.num_microbatches, costs.fwd_share
    w = a.zb_weight_grad_fraction * min(1.0, costs.weight_grad_share)
    simulate = simulate_dualpipe if ev.plan.schedule is Schedule.DUALPIPE else simulate_dualpipev
    sim = simulate(C, X, m, f, w, E, A, dispatch_share)
    for busy, stage in zip(sim.busy_s, ev.stages):
        assert busy == pytest.approx(m * stage.time_per_microbatch_s, rel=1e-9)
    dp_exposed = max(stage.dp_s for stage in ev.stages)
    assert ev.metrics.step_order_step_s == pytest.approx(sim.step_s + dp_exposed, rel=1e-12)
    assert sim.step_s >= max(sim.busy_s) * (1 - 1e-12)


def test_lopsided_dsv3_split_is_slower_by_its_step_order_too():
    """The issue's lopsided DeepSeek-V3 split [3, 16, 15, 27] is slower than [15, 16, 15, 15] by the step order as
    by the closed form."""
    spec = _dsv3()
    lop, bal = evaluate(spec, _dsv3_plan([3, 16, 15, 27])), evaluate(spec, _dsv3_plan([15, 16, 15, 15]))
    assert lop.metrics.step_order_step_s > bal.metrics.step_order_step_s * 1.05


def test_other_schedules_have_no_step_order_step():
    """1F1B, interleaved and ZB-H1 plans report None, and the CLI/service metrics dict leaves the key out."""
    spec = moe_dims.spec()
    for plan in (PlanSpec(pp=4, dp=2, num_microbatches=8), PlanSpec(pp=2, dp=4, schedule="zb-h1", num_microbatches=8),
                 PlanSpec(pp=2, dp=4, schedule="interleaved", vpp=2, num_microbatches=8)):
        ev = evaluate(spec, plan)
        assert ev.metrics.step_order_step_s is None
        assert "step_order_step_s" not in metrics_to_dict(ev)
    ev = evaluate(spec, PlanSpec(pp=4, dp=2, schedule="dualpipe", num_microbatches=16))
    assert metrics_to_dict(ev)["step_order_step_s"] == ev.metrics.step_order_step_s



def test_a_plan_breaking_the_micro_batch_rule_has_no_step_order():
    """DualPipe needs an even m >= 2·pp (dualpipe.py asserts it): the evaluator still prices the plan and names the
    rule among its violations, and reports no step-order step; step_order_s refuses the count outright."""
    spec = moe_dims.spec()
    for m in (6, 7):  # below 2·pp = 8; odd
        ev = evaluate(spec, PlanSpec(pp=4, dp=2, schedule="dualpipe", num_microbatches=m))
        assert any("num_microbatches" in v for v in ev.violations)
        assert ev.metrics.step_order_step_s is None
        with pytest.raises(ValueError, match="no step order"):
            step_order_s(Schedule.DUALPIPE, StageWork([1.0] * 4, [0.0] * 4, 1 / 3, 0.0), m)
    assert evaluate(spec, PlanSpec(pp=4, dp=2, schedule="dualpipe", num_microbatches=8)).metrics.step_order_step_s
