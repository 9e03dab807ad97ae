"""Per-layer costs (costmodel/evaluation/layer_costs.py, costmodel/evaluation/moe_layer.py): SMs held by the all-to-all kernels slow the MoE
layer's compute beside them; the experts' eager clamp and bias kernels (costmodel/moe/expert_elementwise.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from parplan.costmodel.schedules.schedule import Schedule

from tests import physics_cases as physics


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
    one = replace(c, schedule=Schedule.ONE_F_ONE_B)
    assert physics.costs(spec, one).moe.compute_s == pytest.approx(physics.costs(spec_none, one).moe.compute_s)


def test_reserved_sms_slow_only_the_compute_beside_the_kernels():
    """moe_comm.reserved_sm_time_s worked by hand: 10 ms of compute beside 4 ms of dispatch/combine holding 20 % of
    the SMs does 0.8 x 4 = 3.2 ms of its work in those 4 ms and the other 6.8 ms after them on every SM: 10.8 ms,
    0.8 ms more. Beside 20 ms of communication the compute never leaves the reduced SMs: 10/0.8 = 12.5 ms, 2.5 ms
    more (the old whole-layer 1/(1 - x), now an upper bound). No SMs held, no communication: nothing."""
    from parplan.costmodel.moe.moe_comm import reserved_sm_time_s

    assert reserved_sm_time_s(10.0, 4.0, 0.2) == pytest.approx(0.8)
    assert reserved_sm_time_s(10.0, 20.0, 0.2) == pytest.approx(2.5)
    assert reserved_sm_time_s(10.0, 12.5, 0.2) == pytest.approx(2.5)  # the two branches meet at A = C/(1 - x)
    assert reserved_sm_time_s(10.0, 4.0, 0.0) == 0.0 and reserved_sm_time_s(10.0, 0.0, 0.2) == 0.0


def test_narrow_heads_slow_the_attention_core():
    """Llama-3 70B's 64 heads of 128 against the same widths as 128 heads of 64 (GPT-OSS's head dim): the same
    attention-core FLOPs, at 0.75 x the efficiency (costmodel/compute/efficiency.py head_dim_factor: (64/128)/(128/192)),
    so 4/3 x the attention core's time; the GEMMs are unchanged."""
    from parplan.costmodel.compute.architecture import Architecture
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.evaluation.choice import Choice
    from parplan.costmodel.spec.hardware import resolve_gpu
    from parplan.costmodel.evaluation.choice_context import ChoiceContext
    from parplan.costmodel.evaluation.gemm_rates import GemmRates

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
    mean over the layers 53,428,608 per token against 100,663,296 full causal, tests/costmodel/compute/test_architecture.py); learned
    sinks keep FP8 attention off (Transformer Engine v2.14 attention/dot_product_attention/utils.py:728-736: under
    fp8_dpa every backend is disabled for softmax_type != vanilla, so a run with sinks attends in BF16), so the
    fp8_attention speed-up does not apply: with sinks the FP8 run's attention core takes fp8_attention_speedup x
    as long as without them."""
    from parplan.costmodel.compute.architecture import Architecture
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.evaluation.choice import Choice
    from parplan.costmodel.spec.hardware import resolve_gpu
    from parplan.costmodel.evaluation.choice_context import ChoiceContext
    from parplan.costmodel.evaluation.gemm_rates import GemmRates

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


def test_gpt_oss_clamp_and_expert_bias_passes_by_hand():
    """GPT-OSS 120B on 8 H100, EP 8, one 4,096-token micro-batch, every expert equally loaded (moe_load_imbalance 1):
    each GPU's 16 experts take 4096 x 4 = 16,384 routed rows. Megatron-Core's eager clamp (Megatron-LM 2a75ac12
    fusions/fused_bias_geglu.py:424-432) moves 4 + 5 passes over the fc1 output, 16,384 x 5,760 x 2 B =
    188,743,680 B each: 1,698,693,120 B; the per-expert fc2 bias (transformer/moe/experts.py:312-330) 14 passes over
    the fc2 output, 16,384 x 2,880 x 2 B = 94,371,840 B each: 1,321,205,760 B. Together 3,019,898,880 B at H100's
    3,350 GB/s: 0.90146 ms more per MoE layer and micro-batch. A recomputed moe_act (the deepseek_v3 selective
    policy, --recompute-modules layernorm moe_act) runs the clamp's 4 forward passes again: 754,974,720 B more.
    Dense layers and the MoE layer's other terms are unchanged."""
    from parplan.costmodel.evaluation.choice import Choice
    from parplan.costmodel.compute.efficiency import hbm_bandwidth_gbps
    from parplan.costmodel.spec.hardware import resolve_gpu

    def moe(clamp, bias, **kw):
        model = dict(physics.GPT_OSS, moe=dict(physics.GPT_OSS["moe"], activation_clamp=clamp, expert_bias=bias))
        spec = physics.spec(model, 8, gbs=8, moe_load_imbalance=1.0, **kw)
        assert hbm_bandwidth_gbps(resolve_gpu(spec.cluster)) == 3350
        return physics.costs(spec, Choice(tp=1, cp=1, pp=1, dp=8, ep=8, num_microbatches=1, **choice)).moe

    choice = {}
    plain, both = moe(None, False), moe(7.0, True)
    assert both.compute_s - plain.compute_s == pytest.approx(3_019_898_880 / 3.35e12, rel=1e-9)
    assert moe(7.0, False).compute_s - plain.compute_s == pytest.approx(1_698_693_120 / 3.35e12, rel=1e-9)
    assert both.a2a_s == plain.a2a_s and both.tp_s == plain.tp_s
    choice = dict(recompute="selective")
    plain, both = moe(None, False, selective_recompute_policy="deepseek_v3"), moe(7.0, True, selective_recompute_policy="deepseek_v3")
    assert both.compute_s - plain.compute_s == pytest.approx((3_019_898_880 + 754_974_720) / 3.35e12, rel=1e-9)
    # a framework that fuses them: the knobs at 0
    choice = {}
    zero = moe(7.0, True, clamped_glu_forward_passes=0.0, clamped_glu_backward_passes=0.0, expert_bias_passes=0.0)
    assert zero.compute_s == pytest.approx(moe(None, False).compute_s)
