"""frameworks/export_common.py: a model feature a target's file cannot carry is a warning, never dropped silently
(issue 24.7); here the sliding window and sinks of ``model.attention`` and the experts' clamp and biases."""

from __future__ import annotations

from tests import physics_cases as physics

from parplan.frameworks.export_common import model_feature_warnings


def test_attention_variant_and_expert_clamp_are_warnings_for_targets_that_cannot_carry_them():
    spec = physics.spec(physics.GPT_OSS, 64)
    attention, experts = model_feature_warnings(spec, "torchtitan", "the [model] name and flavor")
    assert attention.startswith("model.attention (sliding_window 128, full_attention_every 2, sinks true): torchtitan")
    assert experts.startswith("model.moe (activation_clamp 7.0, expert_bias true): torchtitan")
    plain_moe = dict(physics.GPT_OSS["moe"], activation_clamp=None, expert_bias=False)
    plain = physics.spec({**physics.GPT_OSS, "attention": None, "moe": plain_moe}, 64)
    assert model_feature_warnings(plain, "torchtitan", "the [model] name and flavor") == []
