"""The stage boundary (costmodel/stage_extras.py pipeline_boundary): the p2p each schedule leaves exposed."""

from __future__ import annotations

from dataclasses import replace

import pytest

import physics_cases as physics
from parplan.costmodel.assumptions import resolve_assumptions


def test_dualpipe_p2p_by_default_and_hidden_as_deepseek_reports():
    """DeepSeek-V3's published choice (DualPipe, PP 16). By default each of its stages (a ``stage_layers`` entry; a
    rank runs two) exposes 1F1B's p2p, the fitted ``pp_comm_overlap`` hidden, by hand: one boundary activation of
    4096 tokens x 7168 x 2 B over the PP link both ways. With ``dualpipe_pp_comm_overlap: 1`` (DeepSeek-V3 §3.2.1:
    DualPipe hides PP communication fully) none of it is exposed, and 1F1B's is unchanged."""
    spec, c = physics.dsv3()
    a = resolve_assumptions(None)
    dual = physics.costs(spec, c)
    one = physics.costs(spec, replace(c, schedule="1f1b"))
    assert one.p2p_s > 0 and dual.p2p_s == pytest.approx(one.p2p_s)
    link = dual.links["pp"]
    assert one.p2p_s == pytest.approx(2 * (link.latency_s + 4096 * 7168 * 2 / link.bandwidth_Bps) * (1 - a.pp_comm_overlap))
    hidden, _ = physics.dsv3(dualpipe_pp_comm_overlap=1.0)
    assert physics.costs(hidden, c).p2p_s == 0.0
    assert physics.costs(hidden, replace(c, schedule="1f1b")).p2p_s == pytest.approx(one.p2p_s)
