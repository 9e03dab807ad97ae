"""The framework rules (costmodel/framework_rules.py) on the memory-side dimensions, per framework
(Megatron-Core, the pre-0.13 profile, torchtitan, DeepSpeed), with ``runs_on`` and the search conflicts.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from parplan.costmodel.choice import Choice
from parplan.costmodel.evaluate import evaluate
from parplan.costmodel.spec import PlanSpec
from parplan.frameworks.profiles import choice_rule_violations, profile, runs_on

import memory_dims_cases as memory_dims


def _choice(**kw) -> Choice:
    return Choice(**{"tp": 1, "cp": 1, "pp": 1, "dp": 8, **kw})


@pytest.mark.parametrize("name, version, choice, rule", [
    ("megatron-core", None, _choice(zero_replicas=2), None),
    ("megatron-core", None, _choice(zero_stage=3, zero_replicas=4), None),
    ("megatron-core", None, _choice(optimizer_states="fp32/bf16/bf16", optimizer_offload_fraction=0.3), None),
    ("megatron-core", None, _choice(optimizer_offload_fraction=0.3), "needs the precision-aware optimizer"),
    ("megatron-core", "0.12", _choice(zero_replicas=2), "runs HSDP"),
    ("megatron-core", "0.12", _choice(optimizer_states="fp32/bf16/bf16"), "no precision-aware optimizer"),
    ("megatron-bridge", None, _choice(optimizer_states="fp32/bf16/bf16", optimizer_offload_fraction=1.0), None),
    ("torchtitan", None, _choice(zero_stage=2, zero_replicas=2), None),
    ("torchtitan", None, _choice(zero_stage=2, zero_replicas=2, cp=2, dp=1), "must divide dp (1)"),
    ("torchtitan", None, _choice(zero_stage=2, optimizer_states="fp32/bf16/bf16"), "no precision-aware optimizer"),
    ("torchtitan", None, _choice(zero_stage=2, optimizer_offload_fraction=1.0), "no optimizer-only CPU offload"),
    ("deepspeed", None, _choice(zero_stage=3, zero_replicas=2), None),
    ("deepspeed", None, _choice(zero_stage=1, zero_replicas=2), "runs HSDP (zero_replicas 2) with ZeRO 3 only"),
    ("deepspeed", None, _choice(zero_stage=1, optimizer_offload_fraction=1.0), None),
    ("deepspeed", None, _choice(zero_stage=1, optimizer_offload_fraction=0.5), "needs ZeRO-3"),
    ("deepspeed", None, _choice(zero_stage=3, optimizer_offload_fraction=0.5), None),
    ("deepspeed", None, _choice(zero_stage=0, optimizer_offload_fraction=1.0), "needs ZeRO-1, 2 or 3"),
])
def test_framework_rules(name, version, choice, rule):
    """profiles.py: 'megatron.partial_dist_opt', 'megatron.fsdp_hsdp', 'megatron.precision_aware',
    'megatron.cpu_offload' (the 0.9-0.12 profile predates all three), 'titan.hsdp',
    'titan.no_optimizer_offload', 'deepspeed.mics', 'deepspeed.offload', 'deepspeed.bf16_states'."""
    out = choice_rule_violations(profile(name, version), choice)
    if rule is None:
        assert out == []
    else:
        assert any(rule in v for v in out), out


def test_runs_on_and_search_conflicts():
    spec = memory_dims.spec()
    plan = evaluate(spec, PlanSpec(optimizer_states="fp32/bf16/bf16")).plan
    assert runs_on(spec, plan) == ["megatron-core", "megatron-bridge"]
    hsdp3 = evaluate(spec, PlanSpec(zero_stage=3, zero_replicas=2)).plan
    assert runs_on(spec, hsdp3) == list(("megatron-core", "megatron-bridge", "torchtitan", "deepspeed"))
    with pytest.raises(ValidationError, match="search.optimizer_states .* torchtitan .* no precision-aware"):
        memory_dims.spec(framework="torchtitan", search=dict(optimizer_states=["fp32/bf16/bf16"]))
    with pytest.raises(ValidationError, match="search.optimizer_offload_fractions .* no optimizer-only"):
        memory_dims.spec(framework="torchtitan", search=dict(optimizer_offload_fractions=[1.0]))
    with pytest.raises(ValidationError, match="needs the precision-aware optimizer; list search.optimizer_states"):
        memory_dims.spec(framework="megatron-core", search=dict(optimizer_offload_fractions=[0.5, 1.0]))
    with pytest.raises(ValidationError, match="search.zero_replicas .* has no HSDP"):
        memory_dims.spec(framework={"name": "megatron-core", "version": "0.12.0"}, search=dict(zero_replicas=[2]))
    memory_dims.spec(framework="megatron-core", search=dict(optimizer_offload_fractions=[1.0], optimizer_states=["fp32/fp32/fp32"]))
