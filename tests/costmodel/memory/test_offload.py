"""Optimizer CPU offload (costmodel/memory/offload.py): the round trip by hand (sequential and overlapped) and in the
evaluation.
"""

from __future__ import annotations

import pytest

from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.memory.offload import offload_seconds_per_param
from parplan.costmodel.spec.spec import PlanSpec

from tests import memory_dims_cases as memory_dims


def test_offload_time_by_hand():
    """H100: PCIe Gen5 x16, 64 GB/s per direction; CPU Adam 4.5e9 parameters/s per node shared by its 8 GPUs.
    Per offloaded parameter: 4 B down + 4 B up = 8 / 64e9 = 0.125 ns of copies and 8 / 4.5e9 = 1.778 ns of
    CPU step; in sequence 1.903 ns, overlapped max(0.125, 1.778) ns. ZeRO-1 over 8 ranks: a GPU offloads
    f/8 of its parameters' optimizer states, so dp_s grows by P·f/8 · 1.903 ns."""
    seq = 8 / 64e9 + 8 / 4.5e9
    assert offload_seconds_per_param(64e9, 4.5e9 / 8, 4.0, 4.0, False) == pytest.approx(seq)
    assert offload_seconds_per_param(64e9, 4.5e9 / 8, 4.0, 4.0, True) == pytest.approx(8 / 4.5e9)
    spec = memory_dims.spec()
    base = memory_dims.costs(spec).dense.dp_s
    for f in (0.5, 1.0):
        grown = memory_dims.costs(spec, optimizer_offload_fraction=f).dense.dp_s - base
        assert grown == pytest.approx(memory_dims.P_LAYER * f / 8 * seq)
    over = memory_dims.spec(assumptions=dict(optimizer_offload_overlap=True, host_bandwidth_gbps=4.0))
    # a 4 GB/s link: copies 8/4e9 = 2 ns > CPU 1.778 ns, so the copies set the time
    grown = memory_dims.costs(over, optimizer_offload_fraction=1.0).dense.dp_s - memory_dims.costs(over).dense.dp_s
    assert grown == pytest.approx(memory_dims.P_LAYER / 8 * 8 / 4e9)


def test_offload_in_the_evaluation():
    """The evaluator: the offloaded plan holds fewer model-state bytes, and its step is longer by the round
    trip of every stage's offloaded parameters (all four layers and the embedding/head on one stage)."""
    spec = memory_dims.spec()
    today = evaluate(spec, PlanSpec())
    off = evaluate(spec, PlanSpec(optimizer_states="fp32/fp32/fp32", optimizer_offload_fraction=1.0))
    assert off.plan.optimizer_offload_fraction == 1.0 and off.plan.optimizer_states == "fp32/fp32/fp32"
    params = 4 * memory_dims.P_LAYER + 2 * 32000 * 1024  # the layers, embedding and head (untied)
    assert today.stages[0].model_states_gib - off.stages[0].model_states_gib == pytest.approx(
        params * 12 / 8 / 2**30, rel=1e-3)
    seq = 8 / 64e9 + 8 / 4.5e9
    assert off.metrics.step_time_s - today.metrics.step_time_s == pytest.approx(params / 8 * seq, rel=1e-3)
