"""The CP-SAT stage model tested alone (``solver/cpsat.py``, the cpsat-primer's ``examples/tdd/`` style): fixing
the variables to an assignment is feasible exactly when the table's own rules accept it, and on random tiny tables
the oracle, the CP-SAT model and a brute force over every assignment agree on the least U and the least peak."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from parplan.solver import cpsat, cpsat_rank_split
from parplan.solver.cpsat import build_model
from parplan.solver.oracle import least_peak, peak_mib, solve_table
from parplan.solver.problem import Problem
from parplan.solver.assignment_check import assignment_violations
from parplan.solver.tables import Assignment
from parplan.frameworks.loader import validate_spec

from tests.brute_force import table_brute_force
from tests.solver_checks import CPSAT

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
    spec = validate_spec(dict(
        framework="any", model=model, training=dict(seq_len=2048, global_batch_size=draw(st.sampled_from([4, 8]))),
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
    assume(drawn is not None)
    problem, t = drawn
    cap = problem.cap_kib
    bf = table_brute_force(t, cap)
    ora = solve_table(t, cap)
    cp = cpsat.solve(t, cap, CPSAT, 30)
    assert cp.status in ("OPTIMAL", "INFEASIBLE")
    assert (bf is None) == (ora is None) == (cp.status == "INFEASIBLE"), (t.choice, bf, ora, cp.status)
    if bf is None:
        return
    assert ora.U == cp.value == bf[0], (t.choice, ora.U, cp.value, bf)
    low = least_peak(t, cap, ora)
    cp_low = cpsat.solve(t, cap, CPSAT, 30, hold_objective=ora.U)
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
    assume(drawn is not None)
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


@st.composite
def dualpipe_split_tables(draw):
    """Tiny DualPipe MoE tables with whole-layer recompute: their split is a variable (StageTable.t_split); the
    memory draws include caps where recompute decides the split, and caps where nothing fits."""
    L = draw(st.integers(4, 9))
    model = {**TINY, "num_layers": L, "moe": dict(num_experts=4, top_k=2, expert_ffn_hidden_size=512,
                                                  first_dense_layers=draw(st.integers(0, 2)))}
    pp = draw(st.sampled_from([2, 4]))
    spec = validate_spec(dict(
        framework="any", model=model, training=dict(seq_len=2048, global_batch_size=8 * pp),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=2 * pp, memory_gib=draw(st.sampled_from([1.1, 1.2, 1.3, 1.5, 2.0, 6.0]))),
        search=dict(micro_batch_size=[1], pp=[pp], tp=[1], cp=[1], ep=[2], schedules=["dualpipe"],
                    recompute=["full"], uniform_recompute=draw(st.booleans()))))
    problem = Problem.build(spec)
    if not problem.choices:
        return None
    t = problem.table(draw(st.integers(0, len(problem.choices) - 1)))
    return (problem, t) if t.t_split is not None else None


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(drawn=dualpipe_split_tables())
def test_dropping_dominated_splits_keeps_the_optimum_and_least_peak(drawn):
    """cpsat_rank_split.undominated_splits: every split it drops has a kept split of the same layers with no more exposure and
    no less room, and the model over the kept splits finds the brute force's least U and least peak at it."""
    assume(drawn is not None)
    problem, t = drawn
    cap = problem.cap_kib
    for u in range(t.num_units):
        lo = int(t.layers_min[u])
        hi = lo + max(0, t.num_layers - int(t.layers_min.sum()))
        kept = set(cpsat_rank_split.undominated_splits(t, u, lo, hi))
        for l in range(lo, hi + 1):
            for f in range(t.num_layers + 1):
                e = int(t.t_split[u, l, f])
                if e == -1 or (l, f, e) in kept:
                    continue
                assert any(kl == l and ke <= e and _room(t, u, l, kf) >= _room(t, u, l, f) for kl, kf, ke in kept)
    bf = table_brute_force(t, cap)
    cp = cpsat.solve(t, cap, CPSAT, 30)
    assert (bf is None) == (cp.status == "INFEASIBLE"), (t.choice, bf, cp.status)
    if bf is not None:
        assert cp.value == bf[0]
        assert cpsat.solve(t, cap, CPSAT, 30, hold_objective=cp.value).value == bf[1]


def _room(t, u: int, l: int, f: int) -> int:
    """The recompute a split lets its rank hold, as undominated_splits ranks it."""
    if t.uniform_recompute:
        return min(f, l - f)
    return l - f if u == 0 and t.k_dense else max(f, l - f)
