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
