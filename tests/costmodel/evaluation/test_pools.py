"""Heterogeneous GPU pools (issue 21), first slice: the spec's ``cluster.pools`` and the evaluator of a plan whose
stages sit on pools (``costmodel/evaluation/pools.py``).

Checked: the spec's rules (strict, errors naming the field; one pool = today's spec); a one-pool cluster prices
exactly as ``evaluate``; the heterogeneous step agrees within 5 % with a discrete-event simulation of 1F1B over
the per-stage times (tests/pipeline_sim.py, shared with tests/costmodel/schedules/test_uneven_bubble.py); pool capacity, per-pool
memory limits and the inter-pool boundary are priced where the docstring says.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from parplan.costmodel.evaluation.evaluate import evaluate, resolve_plan
from parplan.costmodel.evaluation.pools import (PoolPlanError, PoolStageTimes, evaluate_pools, inter_pool_link, pool_spec,
                                     pool_usage)
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.frameworks.loader import validate_spec

from tests.pipeline_sim import simulate_1f1b

MODEL = dict(name="small", num_layers=8, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
             num_kv_heads=4, vocab_size=32000, gated_mlp=True, tie_embeddings=False)
TRAINING = dict(seq_len=2048, global_batch_size=64, precision="bf16")
H100 = dict(gpu="H100-SXM-80GB", num_gpus=16, gpus_per_node=8)
A100 = dict(gpu="A100-SXM-80GB", num_gpus=16, gpus_per_node=8)


def pooled(*pools: dict, **cluster) -> Spec:
    # the research space: evaluate_pools prices the plan alone (no framework's rules yet; optimize refuses pools)
    return validate_spec({"framework": "any", "model": MODEL, "training": TRAINING,
                                "cluster": {"pools": list(pools), **cluster}})


# ---- spec


def test_pools_spec_derives_the_cluster_keys_and_dumps_round_trip():
    spec = pooled(H100, A100)
    assert spec.cluster.num_gpus == 32 and spec.cluster.gpu == "H100-SXM-80GB"
    dumped = spec.model_dump(mode="json", exclude_none=True)
    assert "gpu" not in dumped["cluster"] and "num_gpus" not in dumped["cluster"]
    assert validate_spec(dumped) == spec


@pytest.mark.parametrize("key, value", [("gpu", "H100-SXM-80GB"), ("num_gpus", 32), ("memory_gib", 40.0),
                                        ("inter_node_bandwidth_gbps", 10.0)])
def test_pools_and_cluster_gpu_keys_conflict(key, value):
    with pytest.raises(ValidationError, match=f"{key}: give either cluster.{key} or cluster.pools"):
        pooled(H100, A100, **{key: value})


def test_pool_fields_are_strict():
    with pytest.raises(ValidationError, match="tflops"):
        pooled(H100, {**A100, "tflops": 3})
    with pytest.raises(ValidationError, match="whole nodes"):
        pooled(H100, {**A100, "num_gpus": 12})
    with pytest.raises(ValidationError, match="pools"):
        validate_spec({"model": MODEL, "training": TRAINING, "cluster": {"pools": []}})
    with pytest.raises(ValidationError, match="inter_pool_bandwidth_gbps: links pools"):
        validate_spec({"model": MODEL, "training": TRAINING,
                             "cluster": {**H100, "inter_pool_bandwidth_gbps": 10}})


def test_inter_pool_link_defaults_to_the_slower_network():
    assert inter_pool_link(pooled(H100, A100)).bandwidth_Bps == 25e9  # A100's 25 GB/s < H100's 50
    assert inter_pool_link(pooled(H100, A100, inter_pool_bandwidth_gbps=5)).bandwidth_Bps == 5e9


# ---- evaluator


def test_one_pool_prices_as_today():
    """All stages on pool 0 of a one-pool cluster: the same ledger as ``evaluate`` on the plain spec."""
    plain = validate_spec({"framework": "any", "model": MODEL, "training": TRAINING, "cluster": H100})
    one = pooled(H100)
    plan = resolve_plan(plain, PlanSpec(tp=2, pp=4, schedule="1f1b", micro_batch_size=1, stage_layers=[1, 2, 3, 2],
                                        recompute="full", recompute_layers=[1, 1, 0, 0]))
    want = evaluate(plain, plan)
    got = evaluate_pools(one, plan, [0, 0, 0, 0])
    assert got.metrics == want.metrics and got.stages == want.stages and got.violations == want.violations


def mixed_plan(spec: Spec, pp: int, layers: list[int], tp: int = 2, dp: int = 2, mbs: int = 1):
    base = pool_spec(spec, 0, tp * dp * pp)
    return resolve_plan(base, PlanSpec(tp=tp, pp=pp, dp=dp, schedule="1f1b", micro_batch_size=mbs,
                                       stage_layers=layers, recompute="none"))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_heterogeneous_step_agrees_with_a_simulated_1f1b(data):
    """The evaluator's step (m·t_max + uneven bubble + DP) against a discrete-event 1F1B over the same per-stage
    times (F : B = 1 : 2) plus the same exposed DP: within 5 %."""
    pp = data.draw(st.sampled_from([2, 3, 4]))
    slow_tflops = data.draw(st.floats(150, 989))
    pools = [H100, {**H100, "gpu": "A100-SXM-80GB", "peak_bf16_tflops": slow_tflops}]
    spec = pooled(*pools)
    L = MODEL["num_layers"]
    cuts = sorted(data.draw(st.lists(st.integers(1, L - 1), min_size=pp - 1, max_size=pp - 1, unique=True)))
    layers = [b - a for a, b in zip([0, *cuts], [*cuts, L])]
    stage_pools = data.draw(st.lists(st.integers(0, 1), min_size=pp, max_size=pp))
    plan = mixed_plan(spec, pp, layers)
    assume(plan.num_microbatches >= pp)
    ev = evaluate_pools(spec, plan, stage_pools)
    times = PoolStageTimes.of(ev)
    dp_exposed = max(s.dp_s for s in ev.stages)
    simulated = simulate_1f1b(times.forward_s, times.backward_s, plan.num_microbatches) + dp_exposed
    assert ev.metrics.step_time_s >= simulated * (1 - 1e-9)  # the Alpa bubble never under-states
    assert ev.metrics.step_time_s == pytest.approx(simulated, rel=0.05)


def test_slow_pool_stage_is_slower_and_boundary_uses_the_inter_pool_link():
    spec = pooled(H100, A100, inter_pool_bandwidth_gbps=1)
    plan = mixed_plan(spec, 4, [2, 2, 2, 2])
    fast = evaluate_pools(spec, plan, [0, 0, 0, 0])
    mixed = evaluate_pools(spec, plan, [0, 0, 1, 1])
    assert mixed.stages[2].compute_s > fast.stages[2].compute_s  # A100 GEMMs
    assert mixed.stages[0].pp_s == fast.stages[0].pp_s  # no pool boundary next to stage 0
    assert mixed.stages[1].pp_s > fast.stages[1].pp_s  # stage 1 | stage 2 crosses at 1 GB/s
    assert mixed.metrics.step_time_s > fast.metrics.step_time_s
    assert pool_usage(spec, plan.to_choice(), [0, 0, 1, 1]) == [8, 8]


def test_capacity_and_per_pool_memory():
    small = {**A100, "num_gpus": 4, "gpus_per_node": 4, "memory_gib": 1.0}
    spec = pooled(H100, small)
    plan = mixed_plan(spec, 4, [2, 2, 2, 2])  # 4 GPUs per stage
    ev = evaluate_pools(spec, plan, [0, 0, 1, 1])
    assert any("pool 1 (A100-SXM-80GB) gives 8 GPUs" in v for v in ev.violations)
    assert any("usable per GPU of pool 1" in v for v in ev.violations)
    assert not ev.metrics.fits
    ok = evaluate_pools(spec, plan, [0, 0, 0, 0])
    assert not any("pool" in v for v in ok.violations)


def test_unsupported_schedules_and_bad_indices_are_refused():
    spec = pooled(H100, A100)
    plan = mixed_plan(spec, 2, [4, 4])
    with pytest.raises(PoolPlanError, match="stage_pools: 1 entries for pp = 2"):
        evaluate_pools(spec, plan, [0])
    with pytest.raises(PoolPlanError, match="outside 0..1"):
        evaluate_pools(spec, plan, [0, 2])
    base = pool_spec(spec, 0, 16)
    inter = resolve_plan(base, PlanSpec(tp=2, pp=2, dp=4, schedule="interleaved", vpp=2, micro_batch_size=1))
    with pytest.raises(PoolPlanError, match="interleaved"):
        evaluate_pools(spec, inter, [0, 1])


def test_pools_round_trip_through_the_service_proto():
    from parplan.wire import convert

    spec = pooled(H100, {**A100, "memory_gib": 40.0}, inter_pool_bandwidth_gbps=7)
    msg = convert.spec_to_message(spec.model_dump(mode="json", exclude_none=True))
    assert validate_spec(convert.spec_dict_from_message(msg)) == spec


def test_one_pool_spec_optimizes_byte_identically_and_several_pools_need_stage_pools(tmp_path):
    """One pool (its overrides included) is today's spec: the same deterministic optimize output; several pools
    need stage_pools (never priced as pool 0's GPU) and a framework that runs pool plans."""
    import subprocess
    import sys
    from pathlib import Path

    import yaml

    base = {"model": MODEL, "training": TRAINING}
    plain = {**base, "cluster": {**H100, "memory_gib": 60.0}}
    one = {**base, "cluster": {"pools": [{**H100, "memory_gib": 60.0}]}}
    outs = []
    for name, data in (("plain", plain), ("one", one)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        cli = str(Path(sys.executable).parent / "solver-cli")
        run = subprocess.run([cli, "optimize", str(path), "--deterministic",
                              "--format", "json"], capture_output=True, text=True, check=True)
        outs.append(run.stdout)
    assert outs[0] == outs[1]
    from parplan.frameworks.loader import retarget
    from parplan.solver.planner import optimize

    two = pooled(H100, A100)
    named = retarget(two, "torchtitan")
    with pytest.raises(PoolPlanError, match="framework: torchtitan: plans on several cluster.pools run on "
                                            "megatron-core or megatron-bridge only"):
        optimize(named)  # its exports cannot place stages on pools (tests/library/test_pools_api.py plans the others)
    with pytest.raises(ValueError, match=r"plan.stage_pools: a plan on 2 pools names the pool of each of its 2 "):
        evaluate(two, PlanSpec(tp=2, pp=2))  # never priced as pool 0's GPU
    with pytest.raises(ValueError, match=r"stage_pools: 3 entries for pp = 2 stages"):
        evaluate(two, PlanSpec(tp=2, pp=2, dp=4, stage_pools=[0, 1, 1]))
    given = evaluate(two, PlanSpec(tp=2, pp=2, dp=4, stage_pools=[1, 0]))
    assert given.plan.stage_pools == [1, 0]
    assert given == evaluate_pools(two, given.plan.model_copy(update={"stage_pools": None}), [1, 0])


def test_fp8_needs_fp8_on_every_pool():
    with pytest.raises(ValidationError, match=r"A100-SXM-80GB has none \(set cluster.pools\[1\].peak_fp8_tflops"):
        validate_spec({"model": MODEL, "training": {**TRAINING, "precision": "fp8"},
                             "cluster": {"pools": [H100, A100]}})
    with pytest.raises(ValidationError, match=r"set cluster.peak_fp8_tflops or use bf16"):
        validate_spec({"model": MODEL, "training": {**TRAINING, "precision": "fp8"}, "cluster": A100})
    ok = validate_spec({"model": MODEL, "training": {**TRAINING, "precision": "fp8"},
                              "cluster": {"pools": [H100, {**A100, "peak_fp8_tflops": 600.0}]}})
    assert ok.cluster.pools[1].peak_fp8_tflops == 600.0
