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
    spec, c = physics.dsv3(moe_dispatch_sync=False)  # compute_s the compute alone (test_host_floor prices the sync)
    sm = physics.costs(spec, c)
    spec_none, _ = physics.dsv3(ep_comm_sm_fraction=0.0, moe_dispatch_sync=False)
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
