"""The spec (costmodel/spec/spec.py): errors on the memory-side dimensions name the field; the spec at another GPU
count.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from parplan.costmodel.spec.spec import PlanSpec

from tests import memory_dims_cases as memory_dims


def test_spec_errors_name_the_field():
    with pytest.raises(ValidationError, match="(?s)optimizer_offload_fractions.*lies in \\[0, 1\\]"):
        memory_dims.spec(search=dict(optimizer_offload_fractions=[0.5, 1.5]))
    with pytest.raises(ValidationError, match="optimizer_states"):
        memory_dims.spec(search=dict(optimizer_states=["fp32/fp64/fp32"]))
    with pytest.raises(ValidationError, match="search.zero_replicas must not be an empty list"):
        memory_dims.spec(search=dict(zero_replicas=[]))
    with pytest.raises(ValidationError, match="optimizer_offload_fraction"):
        PlanSpec(optimizer_offload_fraction=2.0)


def test_attention_section_errors_name_the_field():
    """model.attention is strict: a window pattern without a window, a zero window, a window past the sequence
    limit and an unknown key are errors naming the field."""
    from tests import physics_cases as physics

    def spec(attention):
        return physics.spec({**physics.GPT_OSS, "attention": attention}, 64)

    assert spec(dict(sliding_window=128, full_attention_every=2, sinks=True)).model.attention.sliding_window == 128
    with pytest.raises(ValidationError, match="attention.full_attention_every needs attention.sliding_window"):
        spec(dict(full_attention_every=2))
    with pytest.raises(ValidationError, match="sliding_window"):
        spec(dict(sliding_window=0))
    with pytest.raises(ValidationError, match="sliding_window"):
        spec(dict(sliding_window=10**12))
    with pytest.raises(ValidationError, match="window_size"):
        spec(dict(window_size=128))


def test_at_gpus_is_the_spec_on_another_gpu_count():
    """``Spec.at_gpus(n)``: cluster.num_gpus replaced, the rest (and the loader's bound framework) kept; the spec
    itself at its own count."""
    spec = memory_dims.spec(gpus=8)
    wider = spec.at_gpus(16)
    assert wider.cluster.num_gpus == 16 and spec.cluster.num_gpus == 8
    assert wider.model_dump(exclude={"cluster"}) == spec.model_dump(exclude={"cluster"})
    assert wider.cluster.model_dump(exclude={"num_gpus"}) == spec.cluster.model_dump(exclude={"num_gpus"})
    assert wider.bound_framework is spec.bound_framework
    assert spec.at_gpus(8) is spec
