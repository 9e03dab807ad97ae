"""The solver against oracles: CP-SAT vs the exhaustive search, and both vs a brute force over the float
cost model.

Acceptance criteria checked here:

* "Optimality: on at least 300 random small specs (hypothesis), the CP-SAT optimum equals the oracle's
  (within 0.1 % after re-evaluation), every returned plan satisfies every constraint, and INFEASIBLE
  agrees." -- :func:`test_cpsat_matches_exhaustive` (300 derandomized examples under the thorough test
  profile, ``PARPLAN_TEST_PROFILE=thorough``; 120 in the default run, tests/conftest.py: sized).
* "Integer scaling error below 0.1 %, tested." -- every returned plan, in both tests below.
* An independent oracle on tiny specs: every plan (every legal degree, schedule, ZeRO stage, recompute
  granularity, stage split and per-stage recompute vector) evaluated by the float evaluator; the solver's
  best must be the minimum -- :func:`test_cpsat_matches_brute_force`. This checks the solver's per-stage
  model (every stage its own layer and recompute count; DualPipe ranks by their totals), its dominance
  pruning, bounds and integer scaling against the evaluator, not against the solver's own tables.
* "Deterministic mode (fixed seed, workers) must give byte-identical answers." -- :func:`test_deterministic`.

Known gaps the brute force found, pinned by strict xfails (they turn into failures once fixed, so the marks
get removed): an unset ``search.etp`` searches only {1, tp} (ETP_EVERY_VALUE). The earlier gap, one layer
count for all middle stages, is closed: the two cases that pinned it are plain tests now.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parplan.costmodel.memory.runtime_memory import memory_for_usable
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.spec.spec import Spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.frameworks.loader import retarget, validate_spec

from tests.brute_force import brute_force, compositions
from tests.conftest import sized, small_specs, spec_repr
from tests.solver_checks import CPSAT, REL_TOL, check_integer_scaling, check_plan

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------ CP-SAT vs exhaustive
class Tally:
    feasible = infeasible = 0


@settings(max_examples=sized(120, 300), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(spec=small_specs(), top_k=st.sampled_from([1, 1, 2, 3, 5, 10]))
def test_cpsat_matches_exhaustive(no_explanations, spec, top_k):
    """CP-SAT and the exhaustive search agree on feasibility and on the k best step times (within 0.1 %,
    values, not plans: ties may pick different plans); every returned plan is legal, fits, respects the
    spec's search restrictions, and its integer objective is within 0.1 % of its float step time."""
    ex = optimize(spec, method="exhaustive", top_k=top_k)
    cp = optimize(spec, method="cpsat", top_k=top_k, controls=CPSAT)
    label = spec_repr(spec)
    assert (ex.status == "INFEASIBLE") == (cp.status == "INFEASIBLE"), (label, ex.status, cp.status)
    assert bool(ex.plans) == bool(cp.plans), label
    if not ex.plans:
        Tally.infeasible += 1
        assert ex.status == cp.status == "INFEASIBLE", (label, ex.status, cp.status)
        return
    Tally.feasible += 1
    assert ex.status == "OPTIMAL" and cp.status == "OPTIMAL", (label, ex.status, cp.status)
    assert len(ex.plans) == len(cp.plans), (label, len(ex.plans), len(cp.plans))
    for j, (a, b) in enumerate(zip(ex.plans, cp.plans)):
        ta, tb = a.metrics.step_time_s, b.metrics.step_time_s
        assert abs(ta - tb) / ta < REL_TOL, (label, j, ta, tb, a.plan, b.plan)
    for res in (ex, cp):
        for ev in res.plans:
            check_plan(spec, ev)
        check_integer_scaling(spec, res)
        times = [ev.metrics.step_time_s for ev in res.plans]
        assert all(t2 >= t1 * (1 - REL_TOL) for t1, t2 in zip(times, times[1:])), (label, times)


def test_oracle_examples_were_mixed():
    """Not vacuous: both feasible and infeasible specs were drawn above (run in the same session)."""
    if Tally.feasible + Tally.infeasible == 0:
        pytest.skip("run together with test_cpsat_matches_exhaustive")
    print(f"\nCP-SAT vs exhaustive: {Tally.feasible} feasible, {Tally.infeasible} infeasible specs")
    # 120 examples: 76 feasible, 44 infeasible
    assert Tally.feasible >= sized(40, 100) and Tally.infeasible >= sized(15, 30), (Tally.feasible, Tally.infeasible)


@settings(max_examples=sized(60, 150), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(tiny=True))
def test_cpsat_matches_brute_force(spec):
    """Tiny specs (≤ 6 layers, ≤ 8 GPUs, one micro-batch size, one or two schedules): the solver's best plan
    is legal, and no plan of the spec's stage split (every composition of the layers, any recompute vector), as
    the float evaluator sees it, is faster by 0.1 % or more; when the solver says INFEASIBLE, no plan fits."""
    res = optimize(spec, method="cpsat", controls=CPSAT)
    label = spec_repr(spec)
    if res.plans:
        best = res.plans[0]
        check_plan(spec, best)
        check_integer_scaling(spec, res)
        below = best.metrics.step_time_s * (1 - REL_TOL)
    else:
        assert res.status == "INFEASIBLE", (label, res.status)
        assert res.explanation is not None and res.explanation.summary, label
        below = None
    found = brute_force(spec, below)
    assert found is None, (label, "solver:", res.status, res.plans[0].plan if res.plans else None,
                           "better or fitting plan:", found.metrics.step_time_s, found.plan)


# Llama-like 6-layer model, pp = 4, 1F1B: stage 1 holds 3 micro-batches in flight, stage 2 only 2. The memory
# is set between the peak of [1, 1, 2, 2] and the least peak of any split with equal middle stages, so stage 1
# fits 1 layer, stage 2 fits 2, and only an unequal-middle split fits without recomputation.
MIDDLE_CASE = {
    "framework": "any",
    "model": {"name": "m", "num_layers": 6, "hidden_size": 1024, "ffn_hidden_size": 4096,
              "num_attention_heads": 8, "vocab_size": 1000},
    "training": {"seq_len": 4096, "global_batch_size": 8},
    "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 4},
    "search": {"tp": [1], "cp": [1], "pp": [4], "micro_batch_size": [1], "schedules": ["1f1b"],
               "zero_stages": [1]},
}


def _middle_case(recompute: list[str]) -> Spec:
    from parplan.costmodel.evaluation.evaluate import evaluate
    from parplan.costmodel.spec.spec import PlanSpec

    spec = validate_spec(MIDDLE_CASE)
    peak = lambda layers: evaluate(spec, PlanSpec(pp=4, stage_layers=layers)).metrics.peak_memory_gib  # noqa: E731
    unequal = peak([1, 1, 2, 2])
    equal = min(peak(x) for x in compositions(6, 4) if x[1] == x[2])
    if not unequal < equal:
        pytest.skip(f"the cost model no longer separates the splits ({unequal:.3f} vs {equal:.3f} GiB)")
    a = resolve_assumptions(spec.assumptions)
    memory = memory_for_usable((unequal + equal) / 2, a)
    return validate_spec({**MIDDLE_CASE, "cluster": {**MIDDLE_CASE["cluster"], "memory_gib": memory},
                                "search": {**MIDDLE_CASE["search"], "recompute": recompute,
                                           "memory_band": False}})  # memory set between two ledger peaks


@pytest.mark.parametrize("recompute", [["none"], ["none", "full"]], ids=["no-recompute", "recompute"])
def test_middle_stages_may_differ_under_memory_pressure(recompute):
    """The first/middle/last solver answered INFEASIBLE with recompute 'none' although stage_layers [1, 1, 2, 2]
    fits, and with 'full' allowed recomputed instead: the per-stage solver finds the unequal middle stages."""
    spec = _middle_case(recompute)
    res = optimize(spec, method="cpsat", controls=CPSAT)
    below = res.plans[0].metrics.step_time_s * (1 - REL_TOL) if res.plans else None
    better = brute_force(spec, below)
    assert better is None, (res.status, [e.plan.stage_layers for e in res.plans], better.plan.stage_layers,
                            better.metrics.step_time_s)
    assert res.plans and len(set(res.plans[0].plan.stage_layers[1:-1])) > 1, res.plans[0].plan
    first_last = validate_spec({**spec.model_dump(exclude_defaults=True),
                                      "search": {**spec.search.model_dump(exclude_defaults=True),
                                                 "stage_split": "first_last"}})
    fl = optimize(first_last, method="cpsat", controls=CPSAT)
    assert not fl.plans or fl.plans[0].metrics.step_time_s > res.plans[0].metrics.step_time_s, fl.status


DUALPIPE_CASE = {
    "framework": "any",
    "model": {"name": "random", "num_layers": 6, "hidden_size": 512, "ffn_hidden_size": 1792,
              "num_attention_heads": 8, "num_kv_heads": 1, "vocab_size": 1000, "gated_mlp": False,
              "tie_embeddings": True,
              "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 512, "num_shared_experts": 1}},
    "training": {"seq_len": 2048, "global_batch_size": 24},
    "cluster": {"gpu": "H800", "num_gpus": 8},
    "search": {"tp": [1], "cp": [2], "pp": [4], "etp": [1, 2], "micro_batch_size": [2],
               "schedules": ["dualpipe"], "uniform_recompute": True},
}


def test_dualpipe_pairs_unequal_middle_stages():
    """6 layers on pp = 4 DualPipe: [1, 1, 2, 2] gives both ranks 3 layers; with equal middle stages the best
    was [1, 2, 2, 1] (ranks of 2 and 4 layers). The per-rank solver balances the ranks."""
    spec = validate_spec(DUALPIPE_CASE)
    res = optimize(spec, method="cpsat", controls=CPSAT)
    best = res.plans[0]
    check_plan(spec, best)
    better = brute_force(spec, best.metrics.step_time_s * (1 - REL_TOL))
    assert better is None, (best.plan.stage_layers, best.metrics.step_time_s, better.plan.stage_layers,
                            better.metrics.step_time_s)
    p = best.plan.stage_layers
    assert p[0] + p[3] == p[1] + p[2] == 3, p


# A MoE model where expert-TP 2 with TP 1 beats every plan with etp in {1, tp}: found by the brute force.
ETP_CASE = {
    "framework": "any",
    "model": {"name": "random", "num_layers": 5, "hidden_size": 1024, "ffn_hidden_size": 4096,
              "num_attention_heads": 4, "num_kv_heads": 1, "vocab_size": 6143,
              "moe": {"num_experts": 8, "top_k": 1, "expert_ffn_hidden_size": 512}},
    "training": {"seq_len": 2048, "global_batch_size": 8},
    "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 4},
    "search": {"micro_batch_size": [1], "schedules": ["1f1b", "zb-h1"], "uniform_recompute": True},
}


def test_unpinned_etp_is_searched_fully():
    """``search.etp`` unset means every legal value (SearchSpec docstring); the default space searches the
    divisors of TP (solver/space.py). This case was a strict xfail while expert-TP cost nothing: tp=1
    pp=2 dp=4 etp=2 beat the solver's best by about 1 %. Since issue 10 prices ETP's all-gather and
    reduce-scatter of the dispatched tokens (4 per MoE layer, costmodel/evaluation/choice.py), no etp outside the
    searched divisors beats the solver's best here; the brute force still tries every legal etp."""
    spec = validate_spec(ETP_CASE)
    res = optimize(spec, method="cpsat", controls=CPSAT)
    best = res.plans[0]
    check_plan(spec, best)
    with mock.patch("tests.brute_force.ETP_EVERY_VALUE", True):
        better = brute_force(spec, best.metrics.step_time_s * (1 - REL_TOL))
    assert better is None, (best.metrics.step_time_s, better.metrics.step_time_s, better.plan)


# ------------------------------------------------------------------------------------------ regressions
TINY_MODEL = {"name": "tiny", "num_layers": 3, "hidden_size": 256, "ffn_hidden_size": 1024,
              "num_attention_heads": 16, "vocab_size": 3371, "tie_embeddings": True}


@pytest.mark.parametrize("method", ["cpsat", "exhaustive"])
def test_single_stage_keeps_1f1b(method):
    """Found by the oracle test: the ZB-H1 dominance dropped 1F1B from the whole space, but ZB-H1 needs
    pp ≥ 2, so every pp = 1 plan vanished (this spec came back INFEASIBLE with an empty conflicting set)."""
    spec = validate_spec({"framework": "any", "model": TINY_MODEL, "training": {"seq_len": 4096, "global_batch_size": 16},
                                "cluster": {"gpu": "B200", "num_gpus": 4},
                                "search": {"pp": [1], "micro_batch_size": [2, 4], "uneven_stages": False}})
    res = optimize(spec, method=method, controls=CPSAT)
    assert res.status == "OPTIMAL", res.explanation
    assert res.plans[0].plan.schedule == "1f1b" and res.plans[0].plan.pp == 1
    check_plan(spec, res.plans[0])


@pytest.mark.parametrize("allowed", [["full"], ["selective", "full"]])
def test_full_without_recomputed_layers_stays_allowed(allowed):
    """Found by the oracle test: a plan that recomputes no layer was reported as recompute 'none' even when
    search.recompute excluded 'none'; it must keep an allowed granularity ('full' with zero counts)."""
    spec = validate_spec({"framework": "any", "model": TINY_MODEL, "training": {"seq_len": 1024, "global_batch_size": 8},
                                "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 2},
                                "search": {"recompute": allowed}})
    for method in ("cpsat", "exhaustive"):
        ev = optimize(spec, method=method, controls=CPSAT).plans[0]
        assert ev.plan.recompute in allowed and not any(ev.plan.recompute_layers), ev.plan
        check_plan(spec, ev)


# A 16-GPU MoE where the second of three CP-SAT solves (top_k = 3) must prove that a row tied with the first
# is optimal: the hint is optimal at once, but the objective bound then crawls up by ~3e4 of a 5.6e8 gap per
# second and deterministic time barely advances, so with SolverControls(deterministic=True, time_limit_s=60)
# the solve ran for more than 10 minutes. Found by a 600-example run of the strategy above (another seed).
# linearization_level=2, use_objective_lb_search or optimize_with_core each prove it in 0.1-0.2 s; the solver
# now uses linearization_level=2 (solver/cpsat.py), and this test keeps it that way.
SLOW_PROOF_CASE = {
    "framework": "any",
    "model": {"name": "random", "num_layers": 8, "hidden_size": 512, "ffn_hidden_size": 2048,
              "num_attention_heads": 16, "num_kv_heads": 8, "vocab_size": 45439, "tie_embeddings": True,
              "moe": {"num_experts": 4, "top_k": 1, "expert_ffn_hidden_size": 512, "first_dense_layers": 1}},
    "training": {"seq_len": 1024, "global_batch_size": 64},
    "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 16},
    "search": {"ep": [4, 8], "etp": [1], "micro_batch_size": [1, 4], "recompute": ["selective", "full"],
               "uniform_recompute": True},
    "assumptions": {"preset": "textbook"},
}


def test_cpsat_proves_tied_rows_quickly():
    """The exhaustive search answers in 0.1 s; CP-SAT must prove the same three values optimal within a 3 s
    wall-clock limit (it returned FEASIBLE, proof missing, at linearization_level=1). Wall-clock limited here
    so the test cannot hang."""
    spec = validate_spec(SLOW_PROOF_CASE)
    ex = optimize(spec, method="exhaustive", top_k=3)
    cp = optimize(spec, method="cpsat", top_k=3, controls=SolverControls(workers=1, time_limit_s=3))
    assert [round(e.metrics.step_time_s, 9) for e in cp.plans] == [round(e.metrics.step_time_s, 9) for e in ex.plans]
    assert cp.status == "OPTIMAL", cp.status


# ------------------------------------------------------------------------------------------ determinism
def _load(path: Path) -> Spec:
    return validate_spec(yaml.safe_load(path.read_text()))


def _llama70b() -> Spec:
    for p in (ROOT / "examples" / "llama3-70b-64xh100.yaml", ROOT.parent / "shared" / "spec" / "llama3-70b-64xh100.yaml"):
        if p.exists():  # the research space this determinism check was written for (omitted: megatron-core)
            return retarget(_load(p), "any")
    pytest.skip("llama3-70b-64xh100.yaml not found")


def _textbook() -> Spec:
    for p in (ROOT / "examples" / "seed-textbook-70b-8k.yaml", ROOT.parent / "shared" / "spec" / "seed-textbook-70b-8k.yaml"):
        if p.exists():  # the research space this determinism check was written for (omitted: megatron-core)
            return retarget(_load(p), "any")
    pytest.skip("seed-textbook-70b-8k.yaml not found")


@pytest.mark.parametrize("make_spec", [_llama70b, _textbook], ids=["llama3-70b-64xh100", "seed-textbook-70b-8k"])
def test_deterministic(make_spec):
    """Deterministic mode (one worker, fixed seed, deterministic time limit): two solves give byte-identical
    results, wall times aside."""
    spec = make_spec()
    controls = dict(deterministic=True, seed=7, time_limit_s=60)
    runs = [optimize(spec, method="cpsat", top_k=3, controls=SolverControls(**controls)) for _ in range(2)]
    dumps = [r.model_dump_json(exclude={"stats": {"wall_time_s"}}) for r in runs]
    assert runs[0].status == "OPTIMAL" and len(runs[0].plans) == 3
    assert runs[0].stats.deterministic and runs[0].stats.seed == 7 and runs[0].stats.workers == 1
    assert dumps[0] == dumps[1]
