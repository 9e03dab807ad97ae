"""Per-layer costs (costmodel/layer_costs.py): SMs reserved for the all-to-all slow the MoE layer's compute.
"""

from __future__ import annotations

import pytest

import physics_cases as physics


def test_sms_reserved_for_communication_slow_moe_compute():
    """20 of H800's 132 SMs reserved for the all-to-all (DeepSeek-V3 §3.2.2): the MoE layer's compute
    runs 132/112 = 1.1786 x as long; dense layers are unchanged."""
    spec, c = physics.dsv3()
    base = physics.costs(spec, c)
    spec_sm, _ = physics.dsv3(ep_comm_sm_fraction=20 / 132)
    sm = physics.costs(spec_sm, c)
    ratio = (sm.moe.compute_s - sm.moe.selective_s) / (base.moe.compute_s - base.moe.selective_s)
    assert ratio == pytest.approx(132 / 112)
    assert sm.dense.compute_s == pytest.approx(base.dense.compute_s)
