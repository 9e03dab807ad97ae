"""Pipeline bubbles (costmodel/schedules/bubble.py), worked by hand: DualPipe's paired chunk F&B = F + B, so its bubble
is (p/2 - 1)(F + 2B - 3W), not (p/2 - 1)(2B - 3W) (DeepSeek-V3 §3.2.1, Table 2).
"""

from __future__ import annotations

import pytest

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.schedules.bubble import bubble_time
from parplan.costmodel.evaluation.choice import Choice, bubble_factor
from parplan.costmodel.evaluation.evaluate import evaluate, resolve_plan
from parplan.costmodel.spec.spec import PlanSpec

from tests import physics_cases as physics


def test_dualpipe_bubble_p16_by_hand():
    """B = 2F, W = B/2: per stage time t = F + B = 1, F = 1/3, B = 2/3, W = 1/3 (DeepSeek-V3 Table 2).

    DualPipe: (16/2 - 1)(F&B + B - 3W) with F&B = F + B = 1: 7 · (1 + 2/3 - 1) = 14/3 ≈ 4.667 t.
    ZB-H1: (16 - 1)(F + B - 2W) = 15 · 1/3 = 5 t. 1F1B: 15 t. The old F&B = B (forward compute free)
    gave 7 · (2/3 + 2/3 - 1) = 7/3 t, half of ZB-H1's: the double credit the issue found.
    """
    a = resolve_assumptions({})
    dual = bubble_factor(Choice(tp=1, cp=1, pp=16, dp=1, num_microbatches=64, schedule=Schedule.DUALPIPE), a)
    zb = bubble_factor(Choice(tp=1, cp=1, pp=16, dp=1, num_microbatches=64, schedule=Schedule.ZB_H1), a)
    assert dual == pytest.approx(14 / 3)
    assert zb == pytest.approx(5.0)
    assert zb - dual == pytest.approx(1 / 3)  # DualPipe's whole bubble advantage at p = 16: a third of a stage
    old = bubble_time(Schedule.DUALPIPE, 16, 1 / 3, 2 / 3, 1 / 3, FandB=2 / 3)
    assert old == pytest.approx(7 / 3)
    x = resolve_assumptions({"dualpipe_chunk_overlap": 1.0})  # the old semantics, still expressible
    assert bubble_factor(Choice(tp=1, cp=1, pp=16, dp=1, num_microbatches=64, schedule=Schedule.DUALPIPE), x) == pytest.approx(7 / 3)


def test_dense_dualpipe_never_beats_zb_h1_by_more_than_its_bubble():
    """Llama-3 70B, TP8 PP16 DP1, 64 micro-batches, even stages: the same choice under DualPipe and ZB-H1.

    A dense model has no all-to-all to hide, so DualPipe's gains are exactly its bubble (14/3 stage times
    instead of 5, above) and pairing stage i with p-1-i (its per-micro-batch time is the mean of two stages',
    which spreads the embedding and head). The bubble's 15 idle slots are the other units' times
    (costmodel/schedules/bubble.py, Alpa §5.1 Eq. 2): ZB-H1 5/15·(Σ t - t_max), DualPipe 14/3/15·(Σ t - t_max) over its
    16 rank times; step_zb - step_dp = the bubble difference + m (t_zb - t_dp) + the DP difference, and nothing
    else. With the old F&B the DualPipe factor was 7/3; without ``uneven_stage_bubble``, 5 t_zb."""
    spec = physics.spec(physics.LLAMA70B, 128, seq=8192, gbs=64)
    plan = dict(tp=8, pp=16, micro_batch_size=1, stage_layers=[5] * 16, recompute="full")
    zb = evaluate(spec, PlanSpec(schedule="zb-h1", **plan))
    dp = evaluate(spec, PlanSpec(schedule="dualpipe", **plan))
    m = 64
    # W is the weight-gradient GEMMs' share only (issue 19 item 5): g = the layers' linear-GEMM share of their
    # time, W = g·B/2, so ZB-H1's β = 15·(1 - 2/3·g) and DualPipe's 7·(1 + 2/3 - g) (5 and 14/3 at g = 1)
    a = resolve_assumptions({})
    g = physics.costs(spec, resolve_plan(spec, PlanSpec(schedule="zb-h1", **plan)).to_choice()).weight_grad_share
    assert 0.5 < g < 1.0
    beta_zb, beta_dp = 15 * (1 - 2 / 3 * g), 7 * (5 / 3 - g)
    assert bubble_factor(Choice(tp=8, cp=1, pp=16, dp=1, num_microbatches=m, schedule=Schedule.ZB_H1), a, g) == pytest.approx(beta_zb)
    times_zb = [s.time_per_microbatch_s for s in zb.stages]
    times_dp = [s.time_per_microbatch_s for s in dp.stages]
    t_zb, t_dp = max(times_zb), max(times_dp)
    others_zb, others_dp = (sum(times_zb) - t_zb) / 15, (sum(times_dp) - t_dp) / 15
    assert zb.metrics.breakdown_s["bubble"] == pytest.approx(beta_zb * others_zb)
    assert dp.metrics.breakdown_s["bubble"] == pytest.approx(beta_dp * others_dp)
    assert others_zb < t_zb  # the head makes the last stage the slowest: the others fill and drain faster
    gain = zb.metrics.step_time_s - dp.metrics.step_time_s
    dp_diff = zb.metrics.breakdown_s["dp"] - dp.metrics.breakdown_s["dp"]
    assert gain == pytest.approx(beta_zb * others_zb - beta_dp * others_dp + m * (t_zb - t_dp) + dp_diff)
    # pairing only averages stage times; the mean stage time is the same under both schedules
    mean_zb = sum(times_zb) / 16
    assert t_dp <= t_zb and t_dp >= mean_zb - 1e-12
    # the bubble advantage, 10/3 - 3g stage times (1/3 at g = 1: under 1 % of the step before W was the GEMMs'
    # share; g ≈ 0.74 here, TP8's collectives partly exposed beside GEMMs an eighth wide, about 1.11 stage times:
    # 1.6 % of the step, under 2 %)
    assert beta_zb - beta_dp == pytest.approx(10 / 3 - 3 * g)
    assert (beta_zb - beta_dp) * t_zb < 0.02 * zb.metrics.step_time_s
    old = evaluate(spec.model_copy(update={"assumptions": {"dualpipe_chunk_overlap": 1.0}}),
                   PlanSpec(schedule="dualpipe", **plan))
    times_old = [s.time_per_microbatch_s for s in old.stages]
    # F&B = B: 7·(2/3 + 2/3 - g) (7/3 at g = 1)
    assert old.metrics.breakdown_s["bubble"] == pytest.approx(7 * (4 / 3 - g) * (sum(times_old) - max(times_old)) / 15)
    slowest = evaluate(spec.model_copy(update={"assumptions": {"uneven_stage_bubble": False}}),
                       PlanSpec(schedule="zb-h1", **plan))
    assert slowest.metrics.breakdown_s["bubble"] == pytest.approx(beta_zb * t_zb)
