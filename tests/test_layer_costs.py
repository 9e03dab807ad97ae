"""Per-layer costs (costmodel/layer_costs.py): SMs reserved for the all-to-all slow the MoE layer's compute.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import physics_cases as physics


def test_sms_reserved_for_communication_slow_moe_compute():
    """20 of H800's 132 SMs reserved for the all-to-all (DeepSeek-V3 §3.2.2, the default for overlapped
    schedules): DualPipe's MoE layer computes 132/112 = 1.1786 x as long as with no reservation (fraction 0);
    dense layers are unchanged; 1F1B, which overlaps nothing, reserves none whatever the knob says."""
    spec, c = physics.dsv3()
    sm = physics.costs(spec, c)
    spec_none, _ = physics.dsv3(ep_comm_sm_fraction=0.0)
    base = physics.costs(spec_none, c)
    ratio = (sm.moe.compute_s - sm.moe.selective_s) / (base.moe.compute_s - base.moe.selective_s)
    assert ratio == pytest.approx(132 / 112)
    assert sm.dense.compute_s == pytest.approx(base.dense.compute_s)
    one = replace(c, schedule="1f1b")
    assert physics.costs(spec, one).moe.compute_s == pytest.approx(physics.costs(spec_none, one).moe.compute_s)


def test_narrow_heads_slow_the_attention_core():
    """Llama-3 70B's 64 heads of 128 against the same widths as 128 heads of 64 (GPT-OSS's head dim): the same
    attention-core FLOPs, at 0.75 x the efficiency (costmodel/efficiency.py head_dim_factor: (64/128)/(128/192)),
    so 4/3 x the attention core's time; the GEMMs are unchanged."""
    from parplan.costmodel.architecture import Architecture
    from parplan.costmodel.assumptions import resolve_assumptions
    from parplan.costmodel.choice import Choice
    from parplan.costmodel.hardware import resolve_gpu
    from parplan.costmodel.layer_costs import ChoiceContext, GemmRates

    c = Choice(tp=4, cp=1, pp=1, dp=2, num_microbatches=4, sequence_parallel=True)

    def rates(model):
        spec = physics.spec(model, 8, seq=8192, gbs=8)
        arch = Architecture(spec.model)
        ctx = ChoiceContext.of(spec, c, resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions), arch, 8, 1)
        return arch, GemmRates.of(ctx)

    arch_w, wide = rates(physics.LLAMA70B)
    arch_n, narrow = rates(dict(physics.LLAMA70B, num_attention_heads=128, num_kv_heads=16, head_dim=64))
    assert arch_n.attention_core_flops(8192) == pytest.approx(arch_w.attention_core_flops(8192))
    assert narrow.spf_dense == pytest.approx(wide.spf_dense)
    assert narrow.attn_core_s == pytest.approx(wide.attn_core_s * 4 / 3)
