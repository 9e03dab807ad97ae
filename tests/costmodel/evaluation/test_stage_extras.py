"""The stage boundary (costmodel/evaluation/stage_extras.py pipeline_boundary): the p2p each schedule leaves exposed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests import physics_cases as physics
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.assumptions import resolve_assumptions


def test_dualpipe_p2p_hidden_as_its_step_order_hides_it():
    """DeepSeek-V3's published choice (DualPipe, PP 16, 120 micro-batches). 1F1B exposes one boundary activation of
    4096 tokens x 7168 x 2 B over the PP link both ways, the fitted ``pp_comm_overlap`` hidden. DualPipe hides it in
    its F&B steps (DeepSeek-V3 §3.2.1: "both all-to-all and PP communication can be fully hidden") and exposes 1F1B's
    share in the lone chunks of the fill and drain: half rank h of n = 8 runs FB01 = 60 - 16 + h + 1 - [h = 7] and
    FB10 = that + 7 - h pairs (one chunk pass each way per pair) and F0 + F1 + B0 + B1 = 2(2(7 - h) + h + 1 + [h = 7])
    + 16 lone passes (dualpipe.py:358-417, paired_overlap.step_order_counts), paired share P the 8 ranks' mean:
    p2p = 1F1B's x (1 - P). With ``dualpipe_pp_comm_overlap: 1`` none of it is exposed, and 1F1B's is unchanged."""
    spec, c = physics.dsv3()
    a = resolve_assumptions(None)
    dual = physics.costs(spec, c)
    one = physics.costs(spec, replace(c, schedule=Schedule.ONE_F_ONE_B))
    link = dual.links["pp"]
    assert one.p2p_s == pytest.approx(2 * (link.latency_s + 4096 * 7168 * 2 / link.bandwidth_Bps) * (1 - a.pp_comm_overlap))
    shares = []
    for h in range(8):
        fb01 = 60 - 16 + h + 1 - (h == 7)
        fb10 = 60 - 16 + h + 1 + 7 - h
        lone = 2 * (2 * (7 - h) + h + 1 + (h == 7)) + 16
        shares.append(2 * (fb01 + fb10) / (2 * (fb01 + fb10) + lone))
    P = sum(shares) / 8
    assert 0.8 < P < 0.9
    assert dual.p2p_s == pytest.approx(one.p2p_s * (1 - P))
    hidden, _ = physics.dsv3(dualpipe_pp_comm_overlap=1.0)
    assert physics.costs(hidden, c).p2p_s == 0.0
    assert physics.costs(hidden, replace(c, schedule=Schedule.ONE_F_ONE_B)).p2p_s == pytest.approx(one.p2p_s)
