"""Per-layer costs (costmodel/layer_costs.py): SMs held by the all-to-all kernels slow the MoE layer's compute beside them.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import physics_cases as physics


def test_sms_reserved_for_communication_slow_moe_compute():
    """20 of H800's 132 SMs held by the dispatch/combine kernels while they run (DeepSeek-V3 §3.2.2, the default for
    overlapped schedules; DeepEP@ebfe47e csrc/deep_ep.cpp:477 launches them on num_sms blocks): DualPipe's MoE layer
    computes (20/132)·min(A, C·132/112) longer than with no reservation (fraction 0), A its all-to-all (a2a_s,
    fwd+bwd) and C its compute on every SM; dense layers are unchanged; 1F1B, which overlaps nothing, reserves none
    whatever the knob says."""
    spec, c = physics.dsv3()
    sm = physics.costs(spec, c)
    spec_none, _ = physics.dsv3(ep_comm_sm_fraction=0.0)
    base = physics.costs(spec_none, c)
    C, A = base.moe.compute_s - base.moe.selective_s, base.moe.a2a_s
    assert sm.moe.a2a_s == pytest.approx(A)
    assert sm.moe.compute_s - base.moe.compute_s == pytest.approx(20 / 132 * min(A, C * 132 / 112))
    assert sm.dense.compute_s == pytest.approx(base.dense.compute_s)
    one = replace(c, schedule="1f1b")
    assert physics.costs(spec, one).moe.compute_s == pytest.approx(physics.costs(spec_none, one).moe.compute_s)


def test_reserved_sms_slow_only_the_compute_beside_the_kernels():
    """moe_comm.reserved_sm_time_s worked by hand: 10 ms of compute beside 4 ms of dispatch/combine holding 20 % of
    the SMs does 0.8 x 4 = 3.2 ms of its work in those 4 ms and the other 6.8 ms after them on every SM: 10.8 ms,
    0.8 ms more. Beside 20 ms of communication the compute never leaves the reduced SMs: 10/0.8 = 12.5 ms, 2.5 ms
    more (the old whole-layer 1/(1 - x), now an upper bound). No SMs held, no communication: nothing."""
    from parplan.costmodel.moe_comm import reserved_sm_time_s

    assert reserved_sm_time_s(10.0, 4.0, 0.2) == pytest.approx(0.8)
    assert reserved_sm_time_s(10.0, 20.0, 0.2) == pytest.approx(2.5)
    assert reserved_sm_time_s(10.0, 12.5, 0.2) == pytest.approx(2.5)  # the two branches meet at A = C/(1 - x)
    assert reserved_sm_time_s(10.0, 4.0, 0.0) == 0.0 and reserved_sm_time_s(10.0, 0.0, 0.2) == 0.0


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


def test_sliding_window_and_sinks_in_the_attention_core_time():
    """GPT-OSS 120B (physics_cases.GPT_OSS). The windowed layers' attention core is timed at its FLOPs (the
    mean over the layers 53,428,608 per token against 100,663,296 full causal, tests/test_architecture.py); learned
    sinks keep FP8 attention off (Transformer Engine v2.14 attention/dot_product_attention/utils.py:728-736: under
    fp8_dpa every backend is disabled for softmax_type != vanilla, so a run with sinks attends in BF16), so the
    fp8_attention speed-up does not apply: with sinks the FP8 run's attention core takes fp8_attention_speedup x
    as long as without them."""
    from parplan.costmodel.architecture import Architecture
    from parplan.costmodel.assumptions import resolve_assumptions
    from parplan.costmodel.choice import Choice
    from parplan.costmodel.hardware import resolve_gpu
    from parplan.costmodel.layer_costs import ChoiceContext, GemmRates

    c = Choice(tp=1, cp=1, pp=1, dp=8, ep=8, num_microbatches=4)

    def attn_s(attention, precision="bf16", **assumptions):
        spec = physics.spec({**physics.GPT_OSS, "attention": attention}, 8, gbs=32, precision=precision, **assumptions)
        a = resolve_assumptions(spec.assumptions)
        ctx = ChoiceContext.of(spec, c, resolve_gpu(spec.cluster), a, Architecture(spec.model), 8, 1)
        return GemmRates.of(ctx).attn_core_s, a

    windowed, _ = attn_s(dict(sliding_window=128, full_attention_every=2))
    full, _ = attn_s(None)
    assert windowed / full == pytest.approx(53_428_608 / 100_663_296)
    with_sinks, a = attn_s(dict(sinks=True), "fp8", fp8_attention=True)
    without, _ = attn_s(None, "fp8", fp8_attention=True)
    assert a.fp8_attention_speedup > 1
    assert with_sinks == pytest.approx(without * a.fp8_attention_speedup)
    # BF16 attention: sinks change nothing (cuDNN fused attention runs them, fused_attn.cpp:460-465)
    assert attn_s(dict(sinks=True))[0] == pytest.approx(full)
