"""The stage boundary (costmodel/stage_extras.py pipeline_boundary): the p2p each schedule leaves exposed."""

from __future__ import annotations

from dataclasses import replace

import pytest

import physics_cases as physics
from parplan.costmodel.assumptions import resolve_assumptions


def test_dualpipe_hides_its_stage_boundary_p2p():
    """DeepSeek-V3's published choice (DualPipe, PP 16): DualPipe sends a chunk's boundary activations beside the
    partner chunk's compute (DeepSeek-V3 §3.2.1), so by default none of its p2p is exposed; with
    ``dualpipe_pp_comm_overlap`` set to the fitted ``pp_comm_overlap`` each of its stages (a ``stage_layers`` entry;
    a rank runs two) exposes 1F1B's, by hand: one boundary activation of 4096 tokens x 7168 x 2 B over the PP link
    both ways."""
    spec, c = physics.dsv3()
    assert physics.costs(spec, c).p2p_s == 0.0
    a = resolve_assumptions(None)
    spec_fitted, _ = physics.dsv3(dualpipe_pp_comm_overlap=a.pp_comm_overlap)
    dual = physics.costs(spec_fitted, c)
    one = physics.costs(spec_fitted, replace(c, schedule="1f1b"))
    assert one.p2p_s > 0
    assert dual.p2p_s == pytest.approx(one.p2p_s)
    link = dual.links["pp"]
    by_hand = 2 * (link.latency_s + 4096 * 7168 * 2 / link.bandwidth_Bps) * (1 - a.pp_comm_overlap)
    assert one.p2p_s == pytest.approx(by_hand)


def test_other_schedules_keep_the_fitted_share_and_textbook_halves_dualpipe():
    """Only DualPipe reads ``dualpipe_pp_comm_overlap``: 1F1B's p2p is the same whatever it says; the textbook
    preset hides half of DualPipe's p2p like every other schedule's (seed 003)."""
    spec, c = physics.dsv3()
    spec_zero, _ = physics.dsv3(dualpipe_pp_comm_overlap=0.0)
    one = replace(c, schedule="1f1b")
    assert physics.costs(spec, one).p2p_s == pytest.approx(physics.costs(spec_zero, one).p2p_s)
    textbook = resolve_assumptions(physics.dsv3()[0].assumptions.model_copy(update={"preset": "textbook"}))
    assert textbook.dualpipe_pp_comm_overlap == textbook.pp_comm_overlap == 0.5
