"""The framework rules (costmodel/spec/framework_rules.py) on the memory-side dimensions, per framework
(Megatron-Core, the pre-0.13 profile, torchtitan, DeepSpeed), with ``runs_on`` and the search conflicts.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from parplan.costmodel.evaluation.choice import Choice
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.spec import PlanSpec
from parplan.frameworks.profile_data import VERSIONED
from parplan.frameworks.profiles import choice_rule_violations, profile, runs_on

from tests import memory_dims_cases as memory_dims


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


def test_expert_biases_with_expert_tensor_parallelism_are_not_megatron_plans():
    """Megatron-Core refuses biases in MoE layers with ETP > 1 ('Bias in Moe is only supported when ETP==1',
    TransformerConfig.__post_init__): a GPT-OSS plan (expert biases) with etp 2 is not listed for megatron-core or
    megatron-bridge, the megatron-core search never returns one, and the Megatron export warns by the same rule; the
    same plan of a model without biases is listed."""
    from tests import physics_cases as physics
    from parplan.costmodel.evaluation.evaluate import evaluate
    from parplan.costmodel.spec.framework_binding import runs_on
    from parplan.costmodel.evaluation.legality import framework_choice_violations
    from parplan.costmodel.spec.spec import PlanSpec
    from parplan.frameworks.export_megatron import megatron_argument_groups
    from parplan.frameworks.loader import retarget

    spec = physics.spec(physics.GPT_OSS, 64)
    plan = evaluate(spec, PlanSpec(tp=2, pp=4, ep=4, etp=2, micro_batch_size=1, schedule="1f1b")).plan
    assert spec.model.moe.expert_bias
    listed = runs_on(spec, plan)
    assert "megatron-core" not in listed and "megatron-bridge" not in listed
    assert framework_choice_violations(retarget(spec, "megatron-core"), plan.to_choice())
    assert any(w.startswith("model.moe.expert_bias with etp 2") for w in megatron_argument_groups(spec, plan)[1])
    plain = physics.spec({**physics.GPT_OSS, "moe": dict(physics.GPT_OSS["moe"], expert_bias=False)}, 64)
    assert "megatron-core" in runs_on(plain, plan)


def test_torchtitan_022_runs_ddp_only_alone():
    """torchtitan v0.2.2 raises 'DDP has not supported > 1D parallelism' for DDP beside TP, PP or CP
    (models/llama3/infra/parallelize.py:148-151), and its export writes FSDP instead: the 0.2.2 profile refuses
    ZeRO-0 there, as the 2024-12 one did; ZeRO-0 over data parallelism alone stays."""
    from parplan.costmodel.spec.degrees import Choice
    from parplan.frameworks.profiles import choice_rule_violations, profile

    old = profile("torchtitan", "0.2.2")
    with_tp = Choice(tp=2, cp=1, pp=1, dp=4, num_microbatches=4, zero_stage=0, sequence_parallel=True)
    alone = Choice(tp=1, cp=1, pp=1, dp=8, num_microbatches=4, zero_stage=0, sequence_parallel=False)
    assert any("DDP (ZeRO-0) only without TP, PP and CP" in v for v in choice_rule_violations(old, with_tp))
    assert choice_rule_violations(old, alone) == []


_ALL_PROFILES = [prof for versions in VERSIONED.values() for _, prof in versions]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_the_choice_rules_read_only_their_fields(data):
    """solver/space.py caches a profile's verdict by CHOICE_RULE_FIELDS: over every versioned profile and random
    choices, the fields left out (batch split, virtual stages, chunk trims) never change a verdict."""
    from parplan.costmodel.schedules.schedule import Schedule
    from parplan.costmodel.spec.framework_rules import CHOICE_RULE_FIELDS, model_rule_violations
    from parplan.costmodel.spec.model import ModelSpec

    draw = data.draw
    prof = draw(st.sampled_from(_ALL_PROFILES))
    tp, ep = draw(st.sampled_from([1, 2, 4, 8])), draw(st.sampled_from([1, 2, 8]))
    c = Choice(tp=tp, cp=draw(st.sampled_from([1, 2])), pp=draw(st.sampled_from([1, 2, 4])),
               dp=draw(st.sampled_from([1, 2, 8])), ep=ep, etp=draw(st.sampled_from([1, tp])),
               schedule=draw(st.sampled_from(list(Schedule))), zero_stage=draw(st.sampled_from([0, 1, 2, 3])),
               recompute=draw(st.sampled_from(["none", "selective", "full"])),
               cp_comm_type=draw(st.sampled_from(["p2p", "a2a"])), sequence_parallel=draw(st.booleans()),
               zero_replicas=draw(st.sampled_from([1, 2])),
               optimizer_states=draw(st.sampled_from([None, "fp32/bf16/bf16"])),
               optimizer_offload_fraction=draw(st.sampled_from([0.0, 0.5, 1.0])),
               moe_fp8_dispatch=draw(st.booleans()), moe_a2a_overlap=draw(st.booleans()),
               activation_offload_layers=draw(st.sampled_from([0, 2])))
    other = c.but(micro_batch_size=draw(st.sampled_from([1, 2, 4])), num_microbatches=draw(st.sampled_from([1, 8, 64])),
                  vpp=draw(st.sampled_from([1, 2, 4])), first_chunk_trim=draw(st.sampled_from([0, 1])),
                  last_chunk_trim=draw(st.sampled_from([0, 1])))
    assert all(getattr(c, f) == getattr(other, f) for f in CHOICE_RULE_FIELDS)
    model = ModelSpec(name="m", num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
                      vocab_size=32000, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512, expert_bias=True))
    assert choice_rule_violations(prof, c) == choice_rule_violations(prof, other)
    assert model_rule_violations(prof, c, model) == model_rule_violations(prof, other, model)
