"""DualPipeV (``schedule: dualpipev``, costmodel/schedules/dualpipev.py), DeepSeek's cut-in-half DualPipe: 2p half stages on
p ranks, rank i holding stages i and 2p-1-i; bubble ``(PP/2-1)(F&B+B-3W)`` with PP = 2p stages, parameters once,
activations PP+1 = 2p+1 half-rank micro-batches (deepseek-ai/DualPipe@3da1bbe README and dualpipe/dualpipev.py;
torch ScheduleDualPipeV); its legality, frameworks, torchtitan export and import, and the oracle strategies
that draw it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from parplan.costmodel.schedules import dualpipev
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.schedules.bubble import bubble_time
from parplan.costmodel.evaluation.choice import Choice, bubble_factor, choice_costs
from parplan.costmodel.evaluation.evaluate import PlanError, evaluate
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.costmodel.spec.spec import PlanSpec
from parplan.frameworks.export_torchtitan import export as titan_export
from parplan.frameworks.import_plan import spec_from_torchtitan
from parplan.frameworks.profiles import profile
from parplan.solver.planner import optimize

from tests import moe_schedule_cases as moe_dims
from tests.solver_checks import CPSAT


def test_dualpipev_bubble_p4_by_hand():
    """p = 4 ranks, 8 stages. A stage (chunk) is half a rank: with B = 2F and W = B/2, a rank's time t = 1
    gives a chunk F = 1/6, B = 1/3, W = 1/6, F&B = F + B = 1/2 (dualpipe_chunk_overlap 0). README:
    (PP/2 - 1)(F&B + B - 3W) = (8/2 - 1)(1/2 + 1/3 - 1/2) = 3 · 1/3 = 1 rank time. ZB-H1 on 4 stages of the
    same rank time: (4 - 1)(1 - 2/3) = 1 as well; interleaved with v = 2: 3/2; 1F1B: 3."""
    a = resolve_assumptions({})
    v = bubble_factor(Choice(tp=1, cp=1, pp=4, dp=1, num_microbatches=8, schedule=Schedule.DUALPIPEV), a)
    assert v == pytest.approx(1.0)
    assert bubble_time(Schedule.DUALPIPEV, 4, 1 / 3, 2 / 3, 1 / 3, FandB=1.0) == pytest.approx((8 / 2 - 1) * (1 / 2 + 1 / 3 - 3 / 6))
    zb = bubble_factor(Choice(tp=1, cp=1, pp=4, dp=1, num_microbatches=8, schedule=Schedule.ZB_H1), a)
    il = bubble_factor(Choice(tp=1, cp=1, pp=4, dp=1, num_microbatches=8, vpp=2, schedule=Schedule.INTERLEAVED), a)
    assert (zb, il) == pytest.approx((1.0, 1.5))
    # DeepSeek's DualPipe with the same 8 (full-size) stages: (8/2 - 1)(1 + 2/3 - 1) = 2 stage times
    assert bubble_factor(Choice(tp=1, cp=1, pp=8, dp=1, num_microbatches=16, schedule=Schedule.DUALPIPE), a) == pytest.approx(2.0)


def test_dualpipev_inflight_is_2p_plus_1_half_ranks():
    """DualPipe README: activations PP + 1 = 2p + 1 stages' (half-rank) micro-batches per device, i.e.
    (2·4 + 1)/2 = 4.5 rank micro-batches at p = 4, on every rank (dualpipev.py: 2(p-r-1) + 2(r+1) = 2p after
    step 2, one more while a forward overlaps a backward)."""
    c = Choice(tp=1, cp=1, pp=4, dp=2, num_microbatches=8, schedule=Schedule.DUALPIPEV)
    from parplan.costmodel.evaluation.choice import inflight_microbatches
    assert [inflight_microbatches(c, i) for i in range(4)] == [4.5] * 4
    for r in range(4):  # the schedule's own count after its step 2: 2(p - r - 1) + 2(r + 1) chunk forwards
        assert 2 * (4 - r - 1) + 2 * (r + 1) + 1 == 2 * 4 + 1


def test_dualpipev_rank_holds_one_copy_and_both_ends():
    """Dense 8 layers on 4 ranks of 2 (tp 1, dp 2): against 1F1B with the same stage_layers, a middle DualPipeV
    rank holds the same states (one copy of the parameters; DeepSeek's DualPipe holds two stages' worth),
    4.5 instead of 3 or 2 micro-batches of activations, twice the p2p (two chunks each send both ways) where its
    lone chunks run, and
    rank 0 holds the embedding *and* the head (stage 2p-1 is its second chunk)."""
    spec = moe_dims.spec()
    v = evaluate(spec, PlanSpec(tp=1, pp=4, schedule="dualpipev", stage_layers=[2, 2, 2, 2]))
    o = evaluate(spec, PlanSpec(tp=1, pp=4, schedule="1f1b", stage_layers=[2, 2, 2, 2]))
    assert v.violations == [] and o.violations == []
    sv, so = v.stages, o.stages
    assert sv[1].model_states_gib == pytest.approx(so[1].model_states_gib)
    assert sv[2].model_states_gib == pytest.approx(so[2].model_states_gib)
    # rank 0: stage 0's embedding plus the last stage's head
    assert sv[0].model_states_gib == pytest.approx(so[0].model_states_gib + so[3].model_states_gib - so[1].model_states_gib)
    assert sv[3].model_states_gib == pytest.approx(so[1].model_states_gib)
    # activations per micro-batch are the same layers'; in flight: 4.5 vs 1F1B's p - i
    per_mb = so[1].activations_gib / so[1].inflight_microbatches
    assert sv[1].activations_gib == pytest.approx(4.5 * per_mb)
    assert sv[0].logits_gib == pytest.approx(so[3].logits_gib) and sv[3].logits_gib == 0
    # twice 1F1B's p2p in the lone chunks only: the F&B steps hide it (DeepSeek-V3 §3.2.1). m = 16: rank r runs
    # FB01 = 9 + r - [r = 3] and FB10 = 12 pairs of its 64 chunk passes (dualpipev.py:330-395,
    # paired_overlap.step_order_counts): 42, 44, 46, 46 paired, 178/256 on average
    extra = 2 * so[1].pp_s * (1 - 178 / 256) - so[1].pp_s
    assert sv[1].pp_s == pytest.approx(2 * so[1].pp_s * (1 - 178 / 256))
    assert sv[1].time_per_microbatch_s == pytest.approx(so[1].time_per_microbatch_s + extra)
    assert sv[0].time_per_microbatch_s == pytest.approx(
        so[0].time_per_microbatch_s + so[3].time_per_microbatch_s - so[1].time_per_microbatch_s + extra)
    # step = m·t_max + bubble + dp, bubble = (4-1)(F&B + B - 3W)/2 rank times with W = g·B/2, g the layers'
    # linear-GEMM share of their time (issue 19 item 5): 1.5·(5/3 - g) (1 at g = 1), its 3 slots the other
    # ranks' times (costmodel/schedules/bubble.py): 1.5·(5/3 - g)·(Σ t - t_max)/3
    from parplan.costmodel.evaluation.evaluate import resolve_plan
    ps = PlanSpec(tp=1, pp=4, schedule="dualpipev", stage_layers=[2, 2, 2, 2])
    g = choice_costs(spec, resolve_plan(spec, ps).to_choice(), resolve_gpu(spec.cluster),
                     resolve_assumptions(spec.assumptions)).weight_grad_share
    assert 0.3 < g < 1.0
    times = [s.time_per_microbatch_s for s in sv]
    assert v.metrics.breakdown_s["bubble"] == pytest.approx(1.5 * (5 / 3 - g) * (sum(times) - max(times)) / 3)


def test_dualpipev_legality():
    spec = moe_dims.spec(moe_dims.MOE)
    from parplan.costmodel.evaluation.legality import schedule_violations, stage_violations
    few = Choice(tp=1, cp=1, pp=4, dp=2, ep=2, num_microbatches=7, schedule=Schedule.DUALPIPEV)
    assert any("2·pp" in v for v in schedule_violations(spec, few))
    assert schedule_violations(moe_dims.spec(moe_dims.MOE, gbs=18), replace(few, num_microbatches=9)) == []  # odd m is fine
    assert any("pp ≥ 2" in v for v in schedule_violations(spec, replace(few, pp=1, dp=8)))
    # rank 0 holds the first dense layer on its first stage and at least one layer on its second
    assert any("rank 0" in v for v in stage_violations(spec, few, [1, 3, 2, 2], [0] * 4))
    assert stage_violations(spec, few, [2, 2, 2, 2], [0] * 4) == []
    with pytest.raises(PlanError, match="dualpipev"):
        evaluate(spec, PlanSpec(tp=1, pp=4, ep=2, schedule="dualpipev", stage_layers=[1, 3, 2, 2]))


def test_dualpipev_frameworks():
    """torchtitan runs it (torch ScheduleDualPipeV); Megatron-LM and DeepSpeed have no such schedule; torchtitan
    <= 0.2.2 refuses DualPipeV with EP and activation checkpointing (dual_pipe_v.py get_dual_pipe_v_flag)."""
    spec = moe_dims.spec(moe_dims.MOE)
    ev = evaluate(spec, PlanSpec(tp=1, pp=4, ep=2, schedule="dualpipev", stage_layers=[2, 2, 2, 2], zero_stage=2))
    assert ev.runs_on == ["torchtitan"]
    assert "dualpipev" in profile("torchtitan").schedules and "dualpipe" not in profile("torchtitan").schedules
    assert "dualpipev" not in profile("megatron-core").schedules
    old = profile("torchtitan", "0.2.2")
    from parplan.frameworks.profiles import choice_rule_violations
    c = Choice(tp=1, cp=1, pp=4, dp=2, ep=2, num_microbatches=8, schedule=Schedule.DUALPIPEV, recompute="full", zero_stage=2)
    assert any("activation checkpointing" in v for v in choice_rule_violations(old, c))
    assert choice_rule_violations(profile("torchtitan"), c) == []
    assert choice_rule_violations(old, replace(c, recompute="none")) == []


def test_dualpipev_torchtitan_export_and_import():
    """Per-rank totals [3, 2, 2, 3] -> chunks in V order: stages 0..3 the ranks' first halves [2, 1, 1, 2],
    stages 4..7 their second halves in reverse rank order [1, 1, 1, 1]; DualPipeV, no schedule warning; the
    import gives the plan back."""
    spec = moe_dims.spec(dict(moe_dims.DENSE, num_layers=10), framework="torchtitan")
    plan = evaluate(spec, PlanSpec(tp=1, pp=4, schedule="dualpipev", stage_layers=[3, 2, 2, 3], zero_stage=2)).plan
    assert dualpipev.chunk_layers([3, 2, 2, 3]) == [2, 1, 1, 2, 1, 1, 1, 1]
    assert dualpipev.chunk_layers([3, 2], dense_layers=2) == [2, 1, 1, 1]
    out = titan_export(spec, plan)
    assert 'pipeline_parallel_schedule = "DualPipeV"' in out.text
    assert not any("dualpipe" in w.lower() for w in out.warnings), out.warnings
    back = spec_from_torchtitan(out.text, spec.model_copy(update={"plan": None}))
    assert back.plan.schedule == "dualpipev" and back.plan.stage_layers == [3, 2, 2, 3]
    # parplan's DualPipe: not runnable by torchtitan, and the export says so
    dp = evaluate(moe_dims.spec(), PlanSpec(tp=1, pp=4, schedule="dualpipe", stage_layers=[2, 2, 2, 2])).plan
    assert any("cannot run DeepSeek's two-direction DualPipe" in w for w in titan_export(moe_dims.spec(), dp).warnings)


def test_dualpipev_drawn_by_the_oracle_strategies():
    """Not vacuous: the strategies above produce feasible DualPipeV optima and plans using each EP choice."""
    seen = set()
    spec = moe_dims.spec(moe_dims.MOE, precision="fp8", search=dict(schedules=["dualpipev"], pp=[4], moe_fp8_dispatch=[True]))
    best = optimize(spec, method="cpsat", controls=CPSAT).plans[0]
    seen.add((best.plan.schedule, best.plan.moe_fp8_dispatch))
    assert seen == {("dualpipev", True)}
    ov = moe_dims.spec(moe_dims.MOE, search=dict(pp=[1], moe_a2a_overlap=[True]))
    assert optimize(ov, method="cpsat", controls=CPSAT).plans[0].plan.moe_a2a_overlap
