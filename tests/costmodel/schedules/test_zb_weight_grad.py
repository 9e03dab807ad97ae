"""ZB-H1's bubble clamped at 0 and W taken from the weight-gradient GEMMs only (issue 19 item 5).

Zero Bubble Pipeline Parallelism (Qi et al. 2023, arXiv 2401.10241) §2 splits a linear layer's backward into B
(input gradient) and W (weight gradient); the attention core (QKᵀ, AV), the elementwise work and the
communication have no W. ZB-H1's bubble is (p-1)(F + B - 2W) (DeepSeek-V3 Table 2).
"""

from __future__ import annotations

import pytest

from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice, bubble_factor, choice_costs
from parplan.costmodel.spec.hardware import resolve_gpu
from parplan.frameworks.loader import validate_spec

ZB = Choice(tp=1, cp=1, pp=4, dp=1, num_microbatches=16, schedule=Schedule.ZB_H1)


def test_zb_h1_bubble_clamped_at_zero_by_hand():
    """B = 2F, F + B = 1: F = 1/3, B = 2/3. W = B (zb_weight_grad_fraction 1, whole backward): (4-1)(1 - 4/3) =
    -1 unclamped, 0 clamped. W = B/2: 3 · (1 - 2/3) = 1."""
    assert bubble_factor(ZB, resolve_assumptions({"zb_weight_grad_fraction": 1.0})) == 0.0
    assert bubble_factor(ZB, resolve_assumptions({})) == pytest.approx(1.0)


def test_zb_w_share_scales_with_the_gemm_share_by_hand():
    """W = 0.5 · 0.6 · 2/3 = 0.2 with 60 % of the stage in linear GEMMs: 3 · (1 - 0.4) = 1.8 stage times; at share
    1 (the solver's lower bound) 1.0; at share 0 (no GEMMs) W = 0: 1F1B's 3."""
    a = resolve_assumptions({})
    assert bubble_factor(ZB, a, 0.6) == pytest.approx(1.8)
    assert bubble_factor(ZB, a, 1.0) == pytest.approx(1.0)
    assert bubble_factor(ZB, a, 0.0) == pytest.approx(3.0)
    dual = Choice(tp=1, cp=1, pp=8, dp=1, num_microbatches=16, schedule=Schedule.DUALPIPE)
    # DualPipe (8/2 - 1)(F&B + B - 3W), F&B = 1: share 1: 3 · (1 + 2/3 - 1) = 2; share 0.6: 3 · (5/3 - 0.6) = 3.2
    assert bubble_factor(dual, a, 1.0) == pytest.approx(2.0)
    assert bubble_factor(dual, a, 0.6) == pytest.approx(3.2)


def test_weight_grad_share_is_the_linear_gemms_share_and_falls_with_context():
    """Llama-3 8B shape, TP 1: the share is Σ n·linear_s / Σ n·time_s, below 1 (attention core, traffic) and
    lower at 32K tokens than at 4K (the attention core grows with s, the GEMMs do not)."""
    model = dict(name="l8", num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                 num_kv_heads=8, vocab_size=128256)

    def share(seq: int) -> tuple[float, object]:
        spec = validate_spec(dict(model=model, training=dict(seq_len=seq, global_batch_size=32),
                                        cluster=dict(gpu="H100-SXM-80GB", num_gpus=8)))
        c = Choice(tp=1, cp=1, pp=4, dp=2, num_microbatches=16, schedule=Schedule.ZB_H1)
        costs = choice_costs(spec, c, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions))
        return costs.weight_grad_share, costs

    s4, costs = share(4096)
    assert s4 == pytest.approx(costs.dense.linear_s / costs.dense.time_s)
    assert 0.5 < s4 < 1.0
    s32, costs32 = share(32768)
    assert s32 < s4 - 0.1
    a = resolve_assumptions({})
    assert costs32.bubble_s(1.0, a) == pytest.approx(bubble_factor(costs32.choice, a, s32))
    assert costs32.bubble_s(1.0, a) > bubble_factor(costs32.choice, a)  # larger than the whole-backward W's
