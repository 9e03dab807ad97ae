"""The CP-SAT stage → pool model (``solver/pools/cpsat.py``, issue 21) against the exhaustive search
(``solver/pools/search.py: search_pools``) and a brute force over every recompute vector through the evaluator, on
random small two- and three-pool specs (pool sizes, speeds and memories drawn), top-K up to 5; every answer re-evaluated
by ``costmodel/evaluation/pools.py``; the proof (OPTIMAL, INFEASIBLE) and the model's refusals."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from parplan.frameworks.loader import validate_spec
from parplan.costmodel.spec.framework_binding import spec_profile
from parplan.costmodel.evaluation.pools import evaluate_pools
from parplan.solver.pools.search import search_pools
from parplan.solver.pools.choice_model import PoolModelError
from parplan.solver.pools.cpsat import optimize_pools

from tests.solver.pools.test_space import A100, H100, MAX_LAYERS, brute_force, spec_of

SEEN = {"feasible": 0, "empty": 0, "mixed": 0}


@st.composite
def pooled_specs(draw):
    n_pools = draw(st.sampled_from([2, 3]))
    sizes = [draw(st.sampled_from([1, 2, 4])) for _ in range(n_pools)]
    assume(sum(sizes) <= 8)  # the brute force's cost grows with every GPU count it visits
    pools = [dict(gpu=draw(st.sampled_from(["H100-SXM-80GB", "A100-SXM-80GB"])), num_gpus=n, gpus_per_node=n,
                  peak_bf16_tflops=draw(st.sampled_from([100.0, 300.0, 900.0])),
                  # tight to roomy: the usable memory is this less the 0.5 GiB CUDA context, the allocator's 5 %
                  # and the plan's NCCL/TE buffers (costmodel/memory/runtime_memory.py)
                  memory_gib=draw(st.sampled_from([1.0, 1.5, 3.0, 80.0])),
                  inter_node_bandwidth_gbps=draw(st.sampled_from([5.0, 25.0, 50.0])))
             for n in sizes]
    return spec_of(pools, num_layers=draw(st.integers(3, MAX_LAYERS)), batch=draw(st.sampled_from([4, 8]))), draw(
        st.integers(1, 5))


@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(drawn=pooled_specs())
def test_cpsat_equals_exhaustive_and_brute_force(drawn):
    spec, k = drawn
    got = optimize_pools(spec, top_k=k)
    exhaustive = search_pools(spec, top_k=k)
    want = brute_force(spec, k)
    SEEN["feasible" if want else "empty"] += 1
    SEEN["mixed"] += any(len(set(p.stage_pools)) > 1 for p in got.plans)
    assert got.status == ("OPTIMAL" if want else "INFEASIBLE")
    times = [p.evaluation.metrics.step_time_s for p in got.plans]
    assert times == pytest.approx([t for t, _ in want], rel=1e-6)
    assert times == pytest.approx([p.key[0] for p in exhaustive], rel=1e-6)
    for p in got.plans:  # every answer is the evaluator's own
        ev = evaluate_pools(spec, p.evaluation.plan, list(p.stage_pools))
        assert not ev.violations and ev.metrics.step_time_s == p.evaluation.metrics.step_time_s
    if got.plans:
        assert got.stats.best_bound_s == pytest.approx(times[0], rel=1e-6)
    assert len({(p.evaluation.plan.to_choice(), p.stage_pools) for p in got.plans}) == len(got.plans)


def test_the_drawn_specs_were_not_vacuous():
    if sum(SEEN.values()) == 0:
        pytest.skip("run with test_cpsat_equals_exhaustive_and_brute_force (it fills the tally)")
    assert SEEN["feasible"] >= 8 and SEEN["empty"] >= 1 and SEEN["mixed"] >= 3, SEEN


def test_mixed_plan_and_idle_pool_as_the_exhaustive_search():
    mixed = optimize_pools(spec_of([H100, A100]))
    assert mixed.status == "OPTIMAL" and set(mixed.plans[0].stage_pools) == {0, 1}
    assert mixed.plans[0].key[0] == pytest.approx(search_pools(spec_of([H100, A100]))[0].key[0], rel=1e-9)
    idle = optimize_pools(spec_of([H100, {**A100, "peak_bf16_tflops": 30.0}]))
    assert idle.plans[0].gpus_per_pool[1] == 0


def test_leading_dense_layers_are_refused_naming_the_field():
    spec = spec_of([H100, A100])
    dumped = spec.model_dump(mode="json", exclude_none=True)
    dumped["model"]["moe"] = {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 1024, "first_dense_layers": 1}
    with pytest.raises(PoolModelError, match="model.moe.first_dense_layers"):
        optimize_pools(validate_spec(dumped))


def test_exhaustive_method_on_leading_dense_layers_plans_and_says_why_it_has_no_explanation():
    from parplan.solver.planner import optimize

    spec = spec_of([H100, A100])
    dumped = spec.model_dump(mode="json", exclude_none=True)
    dumped["model"].update(num_layers=4, moe={"num_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 1024,
                                              "first_dense_layers": 1})
    got = optimize(validate_spec(dumped), method="exhaustive")
    assert got.status == "OPTIMAL" and got.plans[0].plan.stage_pools is not None
    assert got.placement == [f"no placement explanation: model.moe.first_dense_layers: 1 leading dense layers on a "
                             f"pools spec are not planned yet (stage 0 would mix two layer classes)"]


# the frameworks that run pool plans, the pre-layout Megatron-Core (first and last stage only) among them
FRAMEWORKS = ["megatron-core", "megatron-bridge", {"name": "megatron-core", "version": "0.12.0"}]
SEEN_FW = {"feasible": 0, "mixed": 0, "uniform_recompute": 0}


@st.composite
def framework_specs(draw):
    sizes = [draw(st.sampled_from([2, 4])) for _ in range(2)]
    pools = [dict(gpu=draw(st.sampled_from(["H100-SXM-80GB", "A100-SXM-80GB"])), num_gpus=n, gpus_per_node=n,
                  peak_bf16_tflops=draw(st.sampled_from([100.0, 300.0, 900.0])),
                  memory_gib=draw(st.sampled_from([1.5, 3.0, 80.0]))) for n in sizes]
    search = {"pp": [draw(st.sampled_from([2, 3, 4]))], "stage_split": draw(st.sampled_from(
        [None, "first_last", "even"]))}
    search = {k: v for k, v in search.items() if v is not None}
    spec = spec_of(pools, num_layers=draw(st.integers(4, 6)), batch=draw(st.sampled_from([4, 8])),
                   framework=draw(st.sampled_from(FRAMEWORKS)), search=search)
    return spec, draw(st.integers(1, 3))


@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(drawn=framework_specs())
def test_under_a_framework_cpsat_equals_exhaustive_and_brute_force(drawn):
    """Pool plans under Megatron-Core / Megatron-Bridge: 1F1B only (no ZB-H1), the framework's stage split and its
    recompute counts (the first N layers of every stage, one N) — CP-SAT = exhaustive = the brute force over every
    split and recompute vector; every answer runs on the spec's framework."""
    spec, k = drawn
    got = optimize_pools(spec, top_k=k)
    exhaustive = search_pools(spec, top_k=k)
    want = brute_force(spec, k)
    SEEN_FW["feasible"] += bool(want)
    SEEN_FW["mixed"] += any(len(set(p.stage_pools)) > 1 for p in got.plans)
    assert got.status == ("OPTIMAL" if want else "INFEASIBLE")
    times = [p.evaluation.metrics.step_time_s for p in got.plans]
    assert times == pytest.approx([t for t, _ in want], rel=1e-6)
    assert times == pytest.approx([p.key[0] for p in exhaustive], rel=1e-6)
    for p in got.plans:
        plan = p.evaluation.plan
        SEEN_FW["uniform_recompute"] += len(set(plan.recompute_layers)) > 1 or 0 < min(plan.recompute_layers)
        assert plan.schedule == "1f1b" and not p.evaluation.violations
        assert spec_profile(spec).name in p.evaluation.runs_on


def test_the_framework_specs_were_not_vacuous():
    if sum(SEEN_FW.values()) == 0:
        pytest.skip("run with test_under_a_framework_cpsat_equals_exhaustive_and_brute_force (it fills the tally)")
    assert SEEN_FW["feasible"] >= 6 and SEEN_FW["mixed"] >= 2 and SEEN_FW["uniform_recompute"] >= 1, SEEN_FW
