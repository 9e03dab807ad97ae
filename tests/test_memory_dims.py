"""The memory-side search dimensions (issue 10): HSDP (``zero_replicas``), precision-aware optimizer states
(``optimizer_states``) and optimizer CPU offload (``optimizer_offload_fraction``).

* term by term, numbers worked by hand: bytes per parameter of the optimizer dtypes, model states sharded over
  the HSDP shard group and with the offloaded share removed, the DP time of the shard-group collectives plus
  the replicas' all-reduce (intra-node and across nodes), the offload round trip (sequential and overlapped);
* legality, neutral and per framework (Megatron-Core, the pre-0.13 profile, torchtitan, DeepSpeed), with
  ``runs_on``;
* the space: unset options keep today's space exactly; the states' dominance reduction; the sizes;
* oracles: CP-SAT vs exhaustive vs the brute force over the evaluator with the dimensions always drawn
  (tests/conftest.py's strategies and tests/brute_force.py, which draw them in a quarter of their specs);
* the exports' flags and keys, and the proto fields.

The model of every hand-worked case: 4 layers, h = 1024, MLP 4096 (not gated), 8 heads (MHA):
P = 4h² + 2hf + 2h = 4·1048576 + 2·1024·4096 + 2048 = 12 584 960 parameters per layer.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from parplan.costmodel.assumptions import resolve_assumptions
from parplan.costmodel.choice import Choice, choice_costs
from parplan.costmodel.evaluate import evaluate
from parplan.costmodel.hardware import resolve_gpu
from parplan.costmodel.legality import choice_violations
from parplan.costmodel.memory import model_state_bytes
from parplan.costmodel.offload import offload_seconds_per_param
from parplan.costmodel.optimizer_states import OPTIMIZER_STATE_NAMES, optimizer_state_bytes
from parplan.costmodel.spec import Plan, PlanSpec, Spec
from parplan.frameworks.export_bridge import bridge_overrides
from parplan.frameworks.export_deepspeed import deepspeed_config
from parplan.frameworks.export_megatron import megatron_argv
from parplan.frameworks.export_torchtitan import torchtitan_sections
from parplan.frameworks.profiles import choice_rule_violations, profile, runs_on
from parplan.solver.planner import optimize
from parplan.solver.space import enumerate_choices

from brute_force import brute_force
from conftest import small_specs
from solver_checks import CPSAT, REL_TOL, PlanTally, check_plan, cpsat_matches_exhaustive

P_LAYER = 12_584_960  # parameters of one layer of MODEL (worked in the module docstring)
MODEL = dict(name="m", num_layers=4, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
             vocab_size=32000, gated_mlp=False)
# line rates, no latency, nothing hidden: every DP term is its bytes over its link's bandwidth
PLAIN = dict(intra_node_bandwidth_efficiency=1.0, inter_node_bandwidth_efficiency=1.0, include_latency=False,
             dp_comm_overlap=0.0, zero_microbatch_comm_overlap=0.0, hierarchical_collectives=False)
NV = 450e9  # H100 NVLink per direction (costmodel/hardware.py)
NET = 50e9  # H100 NIC per GPU per direction


def _spec(gpus: int = 8, assumptions: dict | None = None, search: dict | None = None, framework="any",
          gbs: int = 16) -> Spec:
    data = dict(model=MODEL, training=dict(seq_len=2048, global_batch_size=gbs),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=gpus), assumptions={**PLAIN, **(assumptions or {})},
                search=search or {})
    if framework is not None:
        data["framework"] = framework
    return Spec.model_validate(data)


def _costs(spec: Spec, **choice):
    c = Choice(**{"tp": 1, "cp": 1, "pp": 1, "dp": spec.cluster.num_gpus, "num_microbatches": 1,
                  "micro_batch_size": 16 // spec.cluster.num_gpus or 1, **choice})
    a = resolve_assumptions(spec.assumptions)
    return choice_costs(spec, c, resolve_gpu(spec.cluster), a)


# ------------------------------------------------------------------------------------- optimizer states
def test_optimizer_state_bytes_by_hand():
    """Megatron-Core's precision-aware optimizer (arguments.py:3666-3685 at d98e8a64): the moments their
    dtype's size; an fp32 master weight its 16-bit remainder beside the bf16 weight (store_param_remainders,
    optimizer_config.py:192), an fp16 master a 2-byte copy."""
    assert optimizer_state_bytes(None, 12.0) == 12.0  # today's ledger: the assumptions' bytes
    assert optimizer_state_bytes("fp32/fp32/fp32", 12.0) == 2 + 4 + 4 == 10
    assert optimizer_state_bytes("fp32/bf16/bf16", 12.0) == 2 + 2 + 2 == 6
    assert optimizer_state_bytes("fp16/fp8/fp8", 12.0) == 2 + 1 + 1 == 4
    assert optimizer_state_bytes("fp32/fp16/fp8", 99.0) == 2 + 2 + 1 == 5
    assert len(OPTIMIZER_STATE_NAMES) == 2 * 4 * 4  # main {fp32, fp16} x exp_avg x exp_avg_sq {fp32, fp16, bf16, fp8}


def test_model_states_with_dtypes_and_offload_by_hand():
    """ZeRO-1 over 8 ranks, w = 2, g = 4: o/8 + 6 bytes per parameter; fp32/bf16/bf16 (o = 6) with half the
    optimizer states on the host: 6·0.5/8 + 6 = 6.375 bytes per parameter."""
    assert model_state_bytes(1e9, 1, 8, 2.0, 4.0, 6.0, 0.5) == pytest.approx(6.375e9)
    assert model_state_bytes(1e9, 1, 8, 2.0, 4.0, 12.0, 0.0) == 7.5e9  # today: 12/8 + 6
    assert model_state_bytes(1e9, 0, 8, 2.0, 4.0, 12.0, 1.0) == 6e9  # ZeRO-0, all offloaded: w + g
    assert model_state_bytes(1e9, 3, 8, 2.0, 4.0, 8.0, 1.0) == pytest.approx(0.75e9)  # (2 + 4 + 0)/8
    spec = _spec()
    base = _costs(spec)
    low = _costs(spec, optimizer_states="fp32/bf16/bf16", optimizer_offload_fraction=0.5)
    # per layer on one GPU: P·(12/8 + 6) today, P·(6·0.5/8 + 6) with the options
    assert base.dense.states_bytes == pytest.approx(P_LAYER * 7.5)
    assert low.dense.states_bytes == pytest.approx(P_LAYER * 6.375)


# ------------------------------------------------------------------------------------------------- HSDP
def test_hsdp_states_over_the_shard_group_by_hand():
    """dp = 8, ZeRO-1, two replicas: the optimizer states are sharded over 4 ranks: P·(12/4 + 6) = 9 P bytes
    (ZeRO-3: 18/4 = 4.5 P); the shard is half the group, twice the optimizer bytes of today's 12/8."""
    spec = _spec()
    assert _costs(spec, zero_replicas=2).dense.states_bytes == pytest.approx(P_LAYER * 9.0)
    assert _costs(spec, zero_stage=3, zero_replicas=2).dense.states_bytes == pytest.approx(P_LAYER * 4.5)


def test_hsdp_dp_time_inside_a_node_by_hand():
    """8 GPUs of one node, ZeRO-1. Today: reduce-scatter 7/8·4 B and all-gather 7/8·2 B per parameter over
    NVLink: 5.25 B / 450 GB/s. Two replicas: reduce-scatter 3/4·4 and all-gather 3/4·2 in the shard of 4, plus
    the all-reduce of the 1/4 gradient shard over the 2 replicas, 2·(1/2)·4/4 = 1 B: 5.5 B / 450 GB/s
    (Megatron-Core param_and_grad_buffer.py:815-830: reduce-scatter, then the inter-instance all-reduce)."""
    spec = _spec()
    assert _costs(spec).dense.dp_s == pytest.approx(P_LAYER * 5.25 / NV)
    assert _costs(spec, zero_replicas=2).dense.dp_s == pytest.approx(P_LAYER * 5.5 / NV)
    # ZeRO-2 (pp = 1): the per-micro-batch reduce-scatter 3/4·4 plus the replicas' all-reduce 1 B, exposed
    z2 = _costs(spec, zero_stage=2, zero_replicas=2, num_microbatches=1)
    assert z2.dense.zero_s == pytest.approx(P_LAYER * 4.0 / NV)


def test_hsdp_replicas_across_nodes_by_hand():
    """16 GPUs on 2 nodes, dp = 16, two replicas: the shard of 8 is one node (NVLink), the replicas pair GPU i
    of node 0 with GPU i of node 1 (stride 8: the network). Per parameter: 7/8·4 + 7/8·2 B over NVLink and
    2·(1/2)·4/8 = 0.5 B over the NIC. Today's one group of 16 spans both nodes: (15/16)·6 B over the NIC."""
    spec = _spec(gpus=16, gbs=16)
    today = _costs(spec, micro_batch_size=1)
    hsdp = _costs(spec, micro_batch_size=1, zero_replicas=2)
    assert today.dense.dp_s == pytest.approx(P_LAYER * (15 / 16) * 6 / NET)
    assert hsdp.dense.dp_s == pytest.approx(P_LAYER * (5.25 / NV + 0.5 / NET))
    assert hsdp.links["dp_shard"].nvlink and not hsdp.links["dp_replica"].nvlink


# ---------------------------------------------------------------------------------------------- offload
def test_offload_time_by_hand():
    """H100: PCIe Gen5 x16, 64 GB/s per direction; CPU Adam 4.5e9 parameters/s per node shared by its 8 GPUs.
    Per offloaded parameter: 4 B down + 4 B up = 8 / 64e9 = 0.125 ns of copies and 8 / 4.5e9 = 1.778 ns of
    CPU step; in sequence 1.903 ns, overlapped max(0.125, 1.778) ns. ZeRO-1 over 8 ranks: a GPU offloads
    f/8 of its parameters' optimizer states, so dp_s grows by P·f/8 · 1.903 ns."""
    seq = 8 / 64e9 + 8 / 4.5e9
    assert offload_seconds_per_param(64e9, 4.5e9 / 8, 4.0, 4.0, False) == pytest.approx(seq)
    assert offload_seconds_per_param(64e9, 4.5e9 / 8, 4.0, 4.0, True) == pytest.approx(8 / 4.5e9)
    spec = _spec()
    base = _costs(spec).dense.dp_s
    for f in (0.5, 1.0):
        grown = _costs(spec, optimizer_offload_fraction=f).dense.dp_s - base
        assert grown == pytest.approx(P_LAYER * f / 8 * seq)
    over = _spec(assumptions=dict(optimizer_offload_overlap=True, host_bandwidth_gbps=4.0))
    # a 4 GB/s link: copies 8/4e9 = 2 ns > CPU 1.778 ns, so the copies set the time
    grown = _costs(over, optimizer_offload_fraction=1.0).dense.dp_s - _costs(over).dense.dp_s
    assert grown == pytest.approx(P_LAYER / 8 * 8 / 4e9)


def test_offload_in_the_evaluation():
    """The evaluator: the offloaded plan holds fewer model-state bytes, and its step is longer by the round
    trip of every stage's offloaded parameters (all four layers and the embedding/head on one stage)."""
    spec = _spec()
    today = evaluate(spec, PlanSpec())
    off = evaluate(spec, PlanSpec(optimizer_states="fp32/fp32/fp32", optimizer_offload_fraction=1.0))
    assert off.plan.optimizer_offload_fraction == 1.0 and off.plan.optimizer_states == "fp32/fp32/fp32"
    params = 4 * P_LAYER + 2 * 32000 * 1024  # the layers, embedding and head (untied)
    assert today.stages[0].model_states_gib - off.stages[0].model_states_gib == pytest.approx(
        params * 12 / 8 / 2**30, rel=1e-3)
    seq = 8 / 64e9 + 8 / 4.5e9
    assert off.metrics.step_time_s - today.metrics.step_time_s == pytest.approx(params / 8 * seq, rel=1e-3)


# --------------------------------------------------------------------------------------------- legality
def test_neutral_rules():
    spec = _spec()
    a = resolve_assumptions(spec.assumptions)

    def why(**kw):
        c = Choice(tp=1, cp=1, pp=1, dp=8, micro_batch_size=2, num_microbatches=1, **kw)
        return choice_violations(spec, c, a, 8)

    assert why(zero_replicas=2) == [] and why(zero_replicas=8) == []
    assert any("needs ZeRO-1, 2 or 3" in v for v in why(zero_stage=0, zero_replicas=2))
    assert any("must divide dp·cp (8)" in v for v in why(zero_replicas=3))
    assert why(optimizer_offload_fraction=0.5, optimizer_states="fp16/fp8/fp8") == []


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
    spec = _spec()
    plan = evaluate(spec, PlanSpec(optimizer_states="fp32/bf16/bf16")).plan
    assert runs_on(spec, plan) == ["megatron-core", "megatron-bridge"]
    hsdp3 = evaluate(spec, PlanSpec(zero_stage=3, zero_replicas=2)).plan
    assert runs_on(spec, hsdp3) == list(("megatron-core", "megatron-bridge", "torchtitan", "deepspeed"))
    with pytest.raises(ValidationError, match="search.optimizer_states .* torchtitan .* no precision-aware"):
        _spec(framework="torchtitan", search=dict(optimizer_states=["fp32/bf16/bf16"]))
    with pytest.raises(ValidationError, match="search.optimizer_offload_fractions .* no optimizer-only"):
        _spec(framework="torchtitan", search=dict(optimizer_offload_fractions=[1.0]))
    with pytest.raises(ValidationError, match="needs the precision-aware optimizer; list search.optimizer_states"):
        _spec(framework="megatron-core", search=dict(optimizer_offload_fractions=[0.5, 1.0]))
    with pytest.raises(ValidationError, match="search.zero_replicas .* has no HSDP"):
        _spec(framework={"name": "megatron-core", "version": "0.12.0"}, search=dict(zero_replicas=[2]))
    _spec(framework="megatron-core", search=dict(optimizer_offload_fractions=[1.0], optimizer_states=["fp32/fp32/fp32"]))


def test_spec_errors_name_the_field():
    with pytest.raises(ValidationError, match="(?s)optimizer_offload_fractions.*lies in \\[0, 1\\]"):
        _spec(search=dict(optimizer_offload_fractions=[0.5, 1.5]))
    with pytest.raises(ValidationError, match="optimizer_states"):
        _spec(search=dict(optimizer_states=["fp32/fp64/fp32"]))
    with pytest.raises(ValidationError, match="search.zero_replicas must not be an empty list"):
        _spec(search=dict(zero_replicas=[]))
    with pytest.raises(ValidationError, match="optimizer_offload_fraction"):
        PlanSpec(optimizer_offload_fraction=2.0)


# ------------------------------------------------------------------------------------------------ space
def _space(spec: Spec):
    a = resolve_assumptions(spec.assumptions)
    return enumerate_choices(spec, resolve_gpu(spec.cluster), a).choices


def test_unset_options_keep_todays_space():
    """Unset, and set to today's single values, the space is the same list of choices."""
    today = _space(_spec())
    assert _space(_spec(search=dict(zero_replicas=[1], optimizer_offload_fractions=[0.0]))) == today
    assert all(c.zero_replicas == 1 and c.optimizer_states is None and c.optimizer_offload_fraction == 0.0
               for c in today)


def test_space_sizes_and_the_states_reduction():
    """Replicas multiply the ZeRO ≥ 1 choices by the replica counts that divide DP·CP; offload shares multiply
    every choice; of several optimizer dtypes only the fewest bytes are searched (fp16/fp8/fp8: 4 B)."""
    today = _space(_spec())
    hsdp = _space(_spec(search=dict(zero_replicas=[1, 2, 4])))
    expected = sum(1 + sum(1 for r in (2, 4) if c.dense_dp % r == 0 and c.expert_dp % r == 0)
                   if c.zero_stage >= 1 else 1 for c in today)
    assert len(hsdp) == expected > len(today)
    off = _space(_spec(search=dict(optimizer_offload_fractions=[0.0, 0.5, 1.0])))
    shares = {f: [replace(c, optimizer_offload_fraction=0.0) for c in off if c.optimizer_offload_fraction == f]
              for f in (0.0, 0.5, 1.0)}
    for f, choices in shares.items():  # every share of every choice of today's space, and with no DP peers
        assert set(today) <= set(choices)  # (dp·cp = 1) every ZeRO stage, which a framework's offload may need
        assert all(c.dense_dp == 1 for c in set(choices) - set(today))
    assert len(off) > 3 * len(today)
    states = _space(_spec(search=dict(optimizer_states=["fp32/fp32/fp32", "fp16/fp8/fp8", "fp32/bf16/bf16"])))
    assert len(states) == len(today) and {c.optimizer_states for c in states} == {"fp16/fp8/fp8"}


def test_states_reduction_is_exact_for_min_memory():
    """min_memory: the fewest optimizer bytes win, whether or not the reduction removed the others."""
    spec = _spec(search=dict(optimizer_states=["fp32/fp32/fp32", "fp16/fp8/fp8"], tp=[1], pp=[1]))
    spec = spec.model_copy(update={"objective": "min_memory"})
    best = optimize(spec, method="exhaustive").plans[0]
    assert best.plan.optimizer_states == "fp16/fp8/fp8"


# ----------------------------------------------------------------------------------------------- oracles
class MemTally(PlanTally):
    """What the oracle examples exercised: feasible specs, and best plans using each dimension."""

    replicas = states = offload = 0

    @classmethod
    def count(cls, plan) -> None:
        cls.replicas += plan.zero_replicas > 1
        cls.states += plan.optimizer_states is not None
        cls.offload += plan.optimizer_offload_fraction > 0


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(memory_dims=True))
def test_cpsat_matches_exhaustive_with_memory_dims(spec):
    """CP-SAT and the exhaustive search agree with HSDP replicas, optimizer dtypes and offload shares drawn."""
    MemTally.add(cpsat_matches_exhaustive(spec))


def test_memory_dims_oracle_examples_were_mixed():
    """The examples above reach plans with each dimension (so the agreement is not only over today's space)."""
    if MemTally.feasible + MemTally.infeasible == 0:
        pytest.skip("run together with test_cpsat_matches_exhaustive_with_memory_dims")
    t = MemTally
    print(f"\nmemory dims: {t.feasible} feasible, {t.infeasible} infeasible; best plans with replicas {t.replicas}, "
          f"optimizer dtypes {t.states}, offload {t.offload}")
    assert t.feasible >= 10 and t.infeasible >= 1 and t.replicas >= 1 and t.states >= 1 and t.offload >= 1, vars(t)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(tiny=True, memory_dims=True))
def test_cpsat_matches_brute_force_with_memory_dims(spec):
    """No plan the brute force finds over the evaluator (every listed replica count, dtype and share, no
    reduction) is faster than the solver's best by 0.1 %, and none fits where the solver says INFEASIBLE."""
    res = optimize(spec, method="cpsat", controls=CPSAT)
    below = None
    if res.plans:
        check_plan(spec, res.plans[0])
        below = res.plans[0].metrics.step_time_s * (1 - REL_TOL)
    found = brute_force(spec, below)
    assert found is None, (spec.search, res.status, found.plan if found else None)


def test_memory_dims_make_an_infeasible_spec_feasible():
    """A 4-GPU spec whose ZeRO-1 states do not fit: offloading all optimizer states (or 4-byte states) fits,
    and the solver's answer is the brute force's."""
    data = dict(model=dict(MODEL, num_layers=8, hidden_size=4096, ffn_hidden_size=16384, num_attention_heads=32),
                training=dict(seq_len=1024, global_batch_size=4),
                # 16.4 GiB: 15.1 usable (16.4 less the 0.5 GiB CUDA context and 5 % fragmentation), as 18 GiB gave
                # under the single 2 GiB reserve: ZeRO-1 needs 16.3 GiB, offload 11.1, fp8 states 12.8
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=4, memory_gib=16.4),
                search=dict(tp=[1], pp=[1], zero_stages=[1], recompute=["full"]))
    data["framework"] = "any"  # the research space (omitted: megatron-core, whose offload needs optimizer_states)
    tight = Spec.model_validate(data)
    assert optimize(tight, method="exhaustive").status == "INFEASIBLE"
    for extra in (dict(optimizer_offload_fractions=[0.0, 1.0]), dict(optimizer_states=["fp16/fp8/fp8"])):
        spec = Spec.model_validate({**data, "search": {**data["search"], **extra}})
        res = optimize(spec, method="cpsat", controls=CPSAT)
        assert res.plans, extra
        check_plan(spec, res.plans[0])
        assert brute_force(spec, res.plans[0].metrics.step_time_s * (1 - REL_TOL)) is None


# ------------------------------------------------------------------------------------------------ exports
def _plan(spec: Spec, **kw) -> Plan:
    return evaluate(spec, PlanSpec(**kw)).plan


def test_megatron_and_bridge_exports():
    spec = _spec()
    plan = _plan(spec, zero_replicas=2, optimizer_states="fp32/bf16/fp8", optimizer_offload_fraction=0.5)
    argv = megatron_argv(spec, plan)
    joined = " ".join(argv)
    for piece in ("--use-distributed-optimizer", "--num-distributed-optimizer-instances 2",
                  "--use-precision-aware-optimizer", "--main-params-dtype fp32", "--exp-avg-dtype bf16",
                  "--exp-avg-sq-dtype fp8", "--optimizer-cpu-offload", "--optimizer-offload-fraction 0.5"):
        assert piece in joined, piece
    assert "--overlap-cpu-optimizer-d2h-h2d" not in argv
    over = _spec(assumptions=dict(optimizer_offload_overlap=True))
    assert "--overlap-cpu-optimizer-d2h-h2d" in megatron_argv(over, plan)
    assert "--num-distributed-optimizer-instances" not in megatron_argv(spec, _plan(spec))
    keys, warnings = bridge_overrides(spec, plan)
    keys = dict(keys)
    assert keys["ddp.num_distributed_optimizer_instances"] == 2
    assert keys["optimizer.use_precision_aware_optimizer"] is True
    assert keys["optimizer.optimizer_cpu_offload"] is True and keys["optimizer.optimizer_offload_fraction"] == 0.5
    assert any("torch.bfloat16" in w and "torch.uint8" in w for w in warnings)


def test_torchtitan_and_deepspeed_exports():
    spec = _spec()
    par = torchtitan_sections(spec, _plan(spec, zero_stage=3, zero_replicas=2))[0]["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (2, 4)
    _, warns = torchtitan_sections(spec, _plan(spec, zero_stage=2, optimizer_states="fp16/fp8/fp8"))
    assert any("no precision-aware optimizer" in w for w in warns)
    z = deepspeed_config(spec, _plan(spec, zero_stage=3, zero_replicas=2, optimizer_offload_fraction=0.5))[0]
    assert z["zero_optimization"]["mics_shard_size"] == 4
    assert z["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True, "ratio": 0.5}
    cfg, warns = deepspeed_config(spec, _plan(spec, zero_stage=1, zero_replicas=2))
    assert "mics_shard_size" not in cfg["zero_optimization"] and any("ZeRO-3 only" in w for w in warns)


# ------------------------------------------------------------------------------------------------- proto
def test_proto_round_trip_of_the_new_fields():
    pytest.importorskip("grpc")
    from parplan.client.contract import plan_to_dict
    from parplan.server import convert
    from parplan.v1 import planner_pb2 as pb

    spec = _spec(search=dict(zero_replicas=[1, 2], optimizer_states=["fp32/bf16/bf16"],
                             optimizer_offload_fractions=[0.0, 0.5]), framework="megatron-core")  # the proto has no 'any'
    data = json.loads(spec.model_dump_json(exclude_defaults=True))
    back = convert.spec_dict_from_message(convert.spec_to_message(data))
    assert Spec.model_validate(back).search == spec.search
    plan = _plan(spec, zero_replicas=2, optimizer_states="fp32/bf16/bf16", optimizer_offload_fraction=0.5)
    d = plan_to_dict(plan)
    assert d["zero_replicas"] == 2 and d["optimizer_offload_fraction"] == 0.5
    msg = convert.fill_message(pb.Plan(), d)
    assert convert.message_to_dict(msg, omit_unset=False) == d
    today = plan_to_dict(_plan(spec))
    assert "zero_replicas" not in today  # the default plan's dict (and golden outputs) are unchanged
    assert convert.message_to_dict(convert.fill_message(pb.Plan(), today), omit_unset=False) == today


def test_exports_read_back():
    """solver-cli import reads the new flags and keys back into the same plan (frameworks/import_plan.py)."""
    from parplan.frameworks.export import export_plan
    from parplan.frameworks.import_plan import spec_from_export

    spec = _spec()
    cases = [("megatron", _plan(spec, zero_replicas=2, optimizer_states="fp16/bf16/fp8",
                                optimizer_offload_fraction=0.25)),
             ("torchtitan", _plan(spec, zero_stage=3, zero_replicas=4)),
             ("deepspeed", _plan(spec, zero_stage=3, zero_replicas=2, optimizer_offload_fraction=0.5))]
    for target, plan in cases:
        text = export_plan(spec, plan, target).text
        back = spec_from_export(text, target, spec).plan
        for key in ("zero_stage", "zero_replicas", "optimizer_states", "optimizer_offload_fraction"):
            assert getattr(back, key, None) == getattr(plan, key), (target, key, getattr(back, key, None))
