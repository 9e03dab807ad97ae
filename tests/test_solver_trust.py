"""Issue 9's reproductions, each a test that failed on the first/middle/last solver, and the stage model alone.

* Wrong INFEASIBLE / overflow: ``--top 10`` on the 70B example, a global batch of 262,144 sequences.
* Bounded work: 1M GPUs, 1M layers and a single impossible pin answer within the time limit (+ 1 s).
* Every stage its own counts: Llama-3 70B on 64 H100 at TP2 PP8 1F1B is ≥ 2 % faster per-stage than
  first/last (the README quotes the figures this test measures).
* Ties: at equal step time the least peak memory wins; ZeRO stages with no data-parallel peers are one plan.
* The CP-SAT stage model tested alone (cpsat-primer style): fixing the variables to an assignment is feasible
  exactly when the table's own rules accept it; the oracle, CP-SAT and a brute force agree on random tables.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from parplan.costmodel.evaluate import plan_choice
from parplan.costmodel.spec import Spec
from parplan.solver import cpsat
from parplan.solver.cpsat import SolverControls, build_model, check_headroom
from parplan.solver.oracle import brute_force, least_peak, peak_mib, solve_table
from parplan.solver.planner import optimize
from parplan.solver.problem import Problem, assignment_of
from parplan.solver.tables import Assignment, assignment_violations, evaluate_assignment

from solver_checks import check_plan, choice_index

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
ONE = SolverControls(workers=1, deterministic=True, time_limit_s=60)


def _example(**changes) -> dict:
    raw = yaml.safe_load((EXAMPLES / "llama3-70b-64xh100.yaml").read_text())
    raw.setdefault("framework", "any")  # the research space these checks were written for
    for path, value in changes.items():
        node = raw
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return raw


def test_top_10_is_ten_distinct_optimal_plans():
    """Was INFEASIBLE with 0 plans (a numerical failure of the one-model-over-all-choices CP-SAT encoding)."""
    spec = Spec.model_validate(_example())
    cp = optimize(spec, method="cpsat", top_k=10, controls=ONE)
    ex = optimize(spec, method="exhaustive", top_k=10)
    assert cp.status == ex.status == "OPTIMAL"
    assert len(cp.plans) == len(ex.plans) == 10
    keys = {plan_choice(e.plan) for e in cp.plans}
    assert len(keys) == 10  # ten distinct choices (a trimmed chunk layout is a choice of its own)
    for a, b in zip(cp.plans, ex.plans):
        assert a.metrics.step_time_s == pytest.approx(b.metrics.step_time_s, rel=1e-9)
    times = [e.metrics.step_time_s for e in cp.plans]
    assert times == sorted(times)
    for e in cp.plans:
        check_plan(spec, e)


def test_huge_batch_is_not_an_overflow():
    """global_batch_size 262144 gave MODEL_INVALID ('possible integer overflow'), reported as INFEASIBLE."""
    spec = Spec.model_validate(_example(training__global_batch_size=262144))
    cp = optimize(spec, method="cpsat", controls=ONE)
    ex = optimize(spec, method="exhaustive")
    assert cp.status == ex.status == "OPTIMAL"
    assert cp.plans[0].metrics.step_time_s == pytest.approx(ex.plans[0].metrics.step_time_s, rel=1e-9)
    problem = Problem.build(spec)
    t = problem.table(choice_index(problem, cp.plans[0].plan))
    model, _ = build_model(t, problem.cap_kib)
    assert check_headroom(model) < 1 << 62


@pytest.mark.parametrize("changes", [
    {"cluster__num_gpus": 1048576},
    {"cluster__num_gpus": 524288},
    {"model__num_layers": 1000000},
    {"cluster__gpus_per_node": 4, "search__tp": [8]},
], ids=["1M-gpus", "512K-gpus", "1M-layers", "impossible-pin"])
def test_every_call_ends_within_its_time_limit(changes):
    """Each ran 12 s to over 900 s with --time-limit 1 (the explanation searched larger GPU counts unbounded)."""
    spec = Spec.model_validate(_example(**changes))
    t0 = time.perf_counter()
    res = optimize(spec, method="cpsat", controls=SolverControls(time_limit_s=1.0, workers=1))
    assert time.perf_counter() - t0 < 1.0 + 1.0
    assert res.status in ("INFEASIBLE", "UNKNOWN", "FEASIBLE", "OPTIMAL")
    if res.status == "INFEASIBLE":
        assert res.explanation is not None and res.explanation.summary


def test_impossible_pin_is_named():
    spec = Spec.model_validate(_example(cluster__gpus_per_node=4, search__tp=[8]))
    res = optimize(spec, method="cpsat", controls=SolverControls(time_limit_s=30, workers=1))
    assert res.status == "INFEASIBLE"
    assert "search.tp" in res.explanation.conflicting


def _per_stage_case(split: str) -> Spec:
    return Spec.model_validate(_example(search__tp=[2], search__cp=[1], search__pp=[8], search__schedules=["1f1b"],
                                        search__stage_split=split))


def test_per_stage_counts_beat_first_last_on_70b_tp2_pp8():
    """Llama-3 70B, 64 H100, TP2 PP8 1F1B: in-flight micro-batches fall from 8 on stage 0 to 1 on stage 7, so
    stage memory differs a lot; per-stage layer and recompute counts buy ≥ 2 % over first/last."""
    per = optimize(_per_stage_case("per_stage"), method="cpsat", controls=ONE)
    fl = optimize(_per_stage_case("first_last"), method="cpsat", controls=ONE)
    ex = optimize(_per_stage_case("per_stage"), method="exhaustive")
    assert per.status == fl.status == ex.status == "OPTIMAL"
    t_per, t_fl = per.plans[0].metrics.step_time_s, fl.plans[0].metrics.step_time_s
    assert t_per == pytest.approx(ex.plans[0].metrics.step_time_s, rel=1e-9)
    # python benchmarks/readme_claims.py measures it: 64.29 s vs 66.29 s (3.0 %) after this round's refit
    assert t_per <= t_fl / 1.02, (t_per, t_fl, per.plans[0].plan, fl.plans[0].plan)
    assert len(set(per.plans[0].plan.stage_layers[1:-1])) > 1  # the middle stages differ
    check_plan(_per_stage_case("per_stage"), per.plans[0])


def test_zero_stages_without_dp_peers_are_one_plan():
    """At DP = 1 (dense model), ZeRO 1/2/3 were listed as three 'distinct' plans."""
    raw = _example(cluster__num_gpus=8, training__global_batch_size=16, search__tp=[8],
                   search__zero_stages=[1, 2, 3])
    raw["model"]["num_layers"] = 8
    spec = Spec.model_validate(raw)
    res = optimize(spec, method="cpsat", top_k=5, controls=ONE)
    shapes = [e.plan.model_dump(exclude={"zero_stage"}) for e in res.plans if e.plan.dp == 1]
    assert len(shapes) == len({yaml.safe_dump(s) for s in shapes})
    assert {e.plan.zero_stage for e in res.plans if e.plan.dp == 1} <= {1}


def test_equal_step_time_prefers_less_memory():
    """Among assignments of the best choice with its step time, the returned one has the least peak (MiB)."""
    spec = Spec.model_validate(_example())
    res = optimize(spec, method="cpsat", controls=ONE)
    problem = Problem.build(spec)
    i = choice_index(problem, res.plans[0].plan)
    t = problem.table(i)
    best = solve_table(t, problem.cap_kib)
    low = least_peak(t, problem.cap_kib, best)
    assert peak_mib(low.peak_kib) <= peak_mib(best.peak_kib)
    got = evaluate_assignment(t, _assignment(t, res.plans[0].plan))
    assert got[0] == best.U and peak_mib(got[1]) == peak_mib(low.peak_kib)
    # a tighter cap at that step time admits nothing
    tighter = solve_table(t, (peak_mib(low.peak_kib) - 1) * 1024)
    assert tighter is None or tighter.U > best.U


def _assignment(t, plan):
    return assignment_of(t, plan.stage_layers, plan.recompute_layers)


# ------------------------------------------------------------------ the stage model alone
TINY = dict(name="t", num_layers=5, hidden_size=512, ffn_hidden_size=1024, num_attention_heads=8,
            num_kv_heads=2, vocab_size=5000)


@st.composite
def tiny_tables(draw):
    L = draw(st.integers(2, 6))
    model = {**TINY, "num_layers": L}
    if draw(st.booleans()):
        model["moe"] = dict(num_experts=4, top_k=2, expert_ffn_hidden_size=512,
                            first_dense_layers=draw(st.integers(0, min(2, L - 1))))
    split = draw(st.sampled_from(["per_stage", "per_stage", "first_last", "even"]))
    pp = draw(st.sampled_from([1, 2, 3, 4]))
    search = dict(micro_batch_size=[1], stage_split=split, uniform_recompute=draw(st.booleans()),
                  pp=[pp], tp=[1], cp=[1])
    if split == "even":
        search["uneven_stages"] = False
    spec = Spec.model_validate(dict(
        model=model, training=dict(seq_len=2048, global_batch_size=draw(st.sampled_from([4, 8]))),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=pp * draw(st.sampled_from([1, 2])),
                     memory_gib=draw(st.sampled_from([1.5, 2.0, 3.0, 4.0, 6.0]))),
        search=search))
    problem = Problem.build(spec)
    if not problem.choices:
        return None
    i = draw(st.integers(0, len(problem.choices) - 1))
    return problem, problem.table(i)


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(drawn=tiny_tables())
def test_oracle_cpsat_and_brute_force_agree_on_tables(drawn):
    """On random tiny tables (every schedule, split, uniform rule, MoE dense layers): the least U and the least
    peak at that U agree between the oracle, the CP-SAT model and a brute force over every assignment."""
    if drawn is None:
        return
    problem, t = drawn
    cap = problem.cap_kib
    bf = brute_force(t, cap)
    ora = solve_table(t, cap)
    cp = cpsat.solve(t, cap, ONE, 30)
    assert cp.status in ("OPTIMAL", "INFEASIBLE")
    assert (bf is None) == (ora is None) == (cp.status == "INFEASIBLE"), (t.choice, bf, ora, cp.status)
    if bf is None:
        return
    assert ora.U == cp.value == bf[0], (t.choice, ora.U, cp.value, bf)
    low = least_peak(t, cap, ora)
    cp_low = cpsat.solve(t, cap, ONE, 30, hold_objective=ora.U)
    assert peak_mib(low.peak_kib) == cp_low.value == bf[1]
    assert assignment_violations(t, low.x, cap) == []


def _fixed(t, cap, x: Assignment) -> str:
    model, v = build_model(t, cap)
    for var, val in zip(v.layers, x.layers):
        model.add(var == val)
    for var, val in zip(v.recompute, x.recompute):
        model.add(var == val)
    model.add(v.dense_recompute == x.dense)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    return cpsat.STATUS_NAMES[solver.solve(model)]


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(drawn=tiny_tables(), data=st.data())
def test_fixing_the_variables_matches_the_table_rules(drawn, data):
    """The model alone: with every layer and recompute count fixed, it is feasible iff the table's rules
    (assignment_violations) accept the assignment, memory cap included."""
    if drawn is None:
        return
    problem, t = drawn
    cap = problem.cap_kib
    n, L = t.num_units, t.num_layers
    splits = [c for c in itertools.product(range(L + 1), repeat=n) if sum(c) == L]
    layers = data.draw(st.sampled_from(splits))
    rec = tuple(data.draw(st.integers(0, l)) for l in layers)
    dense = data.draw(st.integers(0, t.k_dense))
    x = Assignment(layers, rec, dense)
    ok = not assignment_violations(t, x, cap)
    assert _fixed(t, cap, x) == ("OPTIMAL" if ok else "INFEASIBLE"), (t.choice, x, assignment_violations(t, x, cap))
