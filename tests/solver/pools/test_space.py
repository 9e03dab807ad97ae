"""The exhaustive search of plans on heterogeneous pools (``solver/pools/space.py``, issue 21) against a brute force
over every recompute vector through the evaluator (``costmodel/evaluation/pools.py``), on random small two- and three-pool
specs (pool sizes, speeds and memories drawn), top-K up to 5; and the two shapes of answer the issue asks for: a
mixed plan that beats either pool alone, and a slow pool best left idle; docs/pools.md's mixed plans against the
discrete-event 1F1B simulation (tests/pipeline_sim.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.library.evaluation import evaluate_spec
from parplan.library.spec_io import load_spec_file
from parplan.costmodel.compute.architecture import Architecture
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.framework_binding import spec_profile
from parplan.costmodel.evaluation.pools import PoolStageTimes, evaluate_pools, pool_costs
from parplan.costmodel.spec.spec import Plan, PlanSpec, Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.solver.pools.space import compositions, pool_choices, stage_sequences
from parplan.solver.pools.search import search_pools
from parplan.frameworks.loader import validate_spec

from tests.conftest import sized
from tests.pipeline_sim import simulate_1f1b

MODEL = dict(name="small", num_layers=6, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
             num_kv_heads=4, vocab_size=32000, gated_mlp=True, tie_embeddings=False)
SEARCH = {"tp": [1, 2], "pp": [1, 2, 3], "micro_batch_size": [1], "zero_stages": [1], "recompute": ["none", "full"]}


def spec_of(pools: list[dict], num_layers: int = 6, batch: int = 16, framework="any", search=None,
            **cluster) -> Spec:
    return validate_spec({"framework": framework, "model": {**MODEL, "num_layers": num_layers},
                          "training": {"seq_len": 2048, "global_batch_size": batch, "precision": "bf16"},
                          "cluster": {"pools": pools, **cluster}, "search": {**SEARCH, **(search or {})}})


def split_allowed(spec: Spec, layers: tuple[int, ...]) -> bool:
    """The stage split ``search.stage_split`` and the framework's profile allow (the tighter of the two), written
    out here: even = every stage alike, first_last = the middle stages alike."""
    prof = spec_profile(spec)
    splits = {spec.search.resolved_stage_split, "per_stage" if prof is None else prof.stage_split}
    if "even" in splits:
        return len(set(layers)) == 1
    return "first_last" not in splits or len(set(layers[1:-1])) <= 1


def one_count(spec: Spec, recompute: tuple[int, ...], layers: tuple[int, ...]) -> bool:
    """Under ``uniform_recompute`` (the spec's, or a profile's ``chunk_block`` rule: Megatron's
    --recompute-num-layers N) the planner's reading: every stage recomputes the same N, at most its layers."""
    prof = spec_profile(spec)
    if not (spec.search.uniform_recompute or (prof is not None and prof.full_recompute_counts == "chunk_block")):
        return True
    return len(set(recompute)) == 1 and recompute[0] <= min(layers)


def best_per_sequence(spec: Spec) -> dict[tuple, float]:
    """Every choice, sequence, composition (the stage split allows) and recompute vector (:func:`one_count`)
    through evaluate_pools: the best feasible step time of each (choice, sequence)."""
    a, arch = resolve_assumptions(spec.assumptions), Architecture(spec.model)
    best: dict = {}
    for c in pool_choices(spec, a):
        costs = pool_costs(spec, c, a, arch)
        for seq in stage_sequences(spec, c):
            for layers in filter(lambda ls: split_allowed(spec, ls), compositions(spec.model.num_layers, c.pp)):
                vectors = itertools.product(*(range(n + 1) for n in layers)) if c.recompute == "full" else [
                    (0,) * c.pp]
                for r in filter(lambda r: one_count(spec, r, layers), vectors):
                    ev = evaluate_pools(spec, Plan.from_choice(c, list(layers), list(r)), list(seq), assumptions=a,
                                        costs=costs, arch=arch)
                    if ev.violations:
                        continue
                    t = ev.metrics.step_time_s
                    if (c, seq) not in best or t < best[(c, seq)]:
                        best[(c, seq)] = t
    return best


def brute_force(spec: Spec, top_k: int) -> list[tuple[float, tuple[int, ...]]]:
    """The top-K step times over :func:`best_per_sequence` (one per (choice, sequence))."""
    return sorted((t, seq) for (_, seq), t in best_per_sequence(spec).items())[:top_k]


MAX_LAYERS = sized(5, 6)  # the brute force over 6 layers took ~70 % of the default run's 75 s (2 cores)


@st.composite
def pooled_specs(draw):
    n_pools = draw(st.sampled_from([2, 3]))
    pools = []
    for _ in range(n_pools):
        size = draw(st.sampled_from([1, 2, 4]))
        pools.append(dict(gpu=draw(st.sampled_from(["H100-SXM-80GB", "A100-SXM-80GB"])), num_gpus=size,
                          gpus_per_node=size, peak_bf16_tflops=draw(st.sampled_from([100.0, 300.0, 900.0])),
                          memory_gib=draw(st.sampled_from([3.0, 4.0, 6.0, 80.0]))))
    return spec_of(pools, num_layers=draw(st.integers(3, MAX_LAYERS)), batch=draw(st.sampled_from([4, 8]))), draw(
        st.integers(1, 5))


SEEN = {"feasible": 0, "empty": 0, "mixed": 0, "idle_pool": 0}


@settings(max_examples=sized(12, 25), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(drawn=pooled_specs())
def test_search_equals_brute_force_over_the_evaluator(drawn):
    spec, k = drawn
    want = brute_force(spec, k)
    got = search_pools(spec, top_k=k)
    SEEN["feasible" if want else "empty"] += 1
    SEEN["mixed"] += any(len(set(p.stage_pools)) > 1 for p in got)
    SEEN["idle_pool"] += any(0 in p.gpus_per_pool for p in got)
    assert [p.key[0] for p in got] == pytest.approx([t for t, _ in want], rel=1e-12)
    for p in got:
        ev = evaluate_pools(spec, p.evaluation.plan, list(p.stage_pools))
        assert not ev.violations and ev.metrics.step_time_s == p.evaluation.metrics.step_time_s
        assert sum(p.gpus_per_pool) == p.evaluation.plan.num_gpus
        assert all(u <= pool.num_gpus for u, pool in zip(p.gpus_per_pool, spec.cluster.pools))


def test_the_brute_force_saw_mixed_and_idle_answers():
    """Not vacuous: the drawn specs (run just above) had feasible and infeasible cases, answers spanning pools
    and answers leaving a pool idle."""
    if sum(SEEN.values()) == 0:
        pytest.skip("run with test_search_equals_brute_force_over_the_evaluator (it fills the tally)")
    assert SEEN["feasible"] >= 6 and SEEN["mixed"] >= 3 and SEEN["idle_pool"] >= 3, SEEN


H100 = dict(gpu="H100-SXM-80GB", num_gpus=4, gpus_per_node=4)
A100 = dict(gpu="A100-SXM-80GB", num_gpus=4, gpus_per_node=4)


def alone(pool: dict) -> float:
    return search_pools(spec_of([pool]))[0].evaluation.metrics.step_time_s


def test_mixed_plan_beats_either_pool_alone():
    both = search_pools(spec_of([H100, A100]))[0]
    assert set(both.stage_pools) == {0, 1}
    assert both.evaluation.metrics.step_time_s < min(alone(H100), alone(A100))


def test_a_slow_pool_is_best_left_idle():
    slow = {**A100, "peak_bf16_tflops": 30.0}
    best = search_pools(spec_of([H100, slow]))[0]
    assert set(best.stage_pools) == {0} and best.gpus_per_pool[1] == 0
    assert best.evaluation.metrics.step_time_s == pytest.approx(alone(H100))


def test_nothing_fits_is_an_empty_answer():
    tiny = [{**H100, "memory_gib": 0.5}, {**A100, "memory_gib": 0.5}]
    assert search_pools(spec_of(tiny)) == []


EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "pools"


@pytest.mark.parametrize("which", ["6-layer", "llama3-8b-h100-a100.yaml", "llama3-70b-h100-a100.yaml"])
def test_the_readme_mixed_plans_agree_with_a_simulated_1f1b(which):
    """docs/pools.md's worked examples (benchmarks/pools.py): the best mixed plan, timed under 1F1B (the schedule the
    discrete-event simulation runs; the plans themselves are ZB-H1), against tests/pipeline_sim.py over the
    evaluator's per-stage times plus the exposed DP: within 5 %."""
    spec = spec_of([H100, A100]) if which == "6-layer" else load_spec_file(str(EXAMPLES / which))
    best = optimize(spec, controls=SolverControls(deterministic=True)).plans[0].plan
    assert len(set(best.stage_pools)) == 2  # a mixed plan: both pools used
    ev = evaluate_spec(spec, PlanSpec(**{**best.model_dump(), "schedule": "1f1b"}))
    times = PoolStageTimes.of(ev)
    simulated = simulate_1f1b(times.forward_s, times.backward_s, best.num_microbatches) + max(s.dp_s for s in ev.stages)
    assert ev.metrics.step_time_s == pytest.approx(simulated, rel=0.05)
