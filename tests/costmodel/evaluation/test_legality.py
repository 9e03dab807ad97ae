"""The framework-neutral rules (costmodel/evaluation/legality.py) on HSDP replicas, optimizer dtypes and offload.
"""

from __future__ import annotations

from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.evaluation.choice import Choice
from parplan.costmodel.evaluation.legality import choice_violations

from tests import memory_dims_cases as memory_dims


def test_neutral_rules():
    spec = memory_dims.spec()
    a = resolve_assumptions(spec.assumptions)

    def why(**kw):
        c = Choice(tp=1, cp=1, pp=1, dp=8, micro_batch_size=2, num_microbatches=1, **kw)
        return choice_violations(spec, c, a, 8)

    assert why(zero_replicas=2) == [] and why(zero_replicas=8) == []
    assert any("needs ZeRO-1, 2 or 3" in v for v in why(zero_stage=0, zero_replicas=2))
    assert any("must divide dp·cp (8)" in v for v in why(zero_replicas=3))
    assert why(optimizer_offload_fraction=0.5, optimizer_states="fp16/fp8/fp8") == []
