"""frameworks/export_common.py: a model feature a target's file cannot carry is a warning, never dropped silently
(issue 24.7); here the sliding window and sinks of ``model.attention``."""

from __future__ import annotations

import physics_cases as physics

from parplan.frameworks.export_common import model_feature_warnings


def test_attention_variant_is_a_warning_for_targets_that_cannot_carry_it():
    spec = physics.spec(physics.GPT_OSS, 64)
    (warning,) = model_feature_warnings(spec, "torchtitan", "the [model] name and flavor")
    assert warning.startswith("model.attention (sliding_window 128, full_attention_every 2, sinks true): torchtitan")
    plain = physics.spec({**physics.GPT_OSS, "attention": None}, 64)
    assert model_feature_warnings(plain, "torchtitan", "the [model] name and flavor") == []
