"""The bubble of a pipeline whose stages take unequal times (issue 10: "with unequal stages fill/drain is nearer
Σt_i - t_max").

The cost model charges the schedule's PP-1 idle slots at the other stages' times, β·(Σ t_u - t_max)/(PP-1)
(``costmodel/schedules/bubble.py``; Alpa, Zheng et al., OSDI '22, §5.1 Eq. 2, ``T = Σ t_i + (m-1)·max t_j`` for 1F1B).
Checked here: the formula by hand; against a discrete-event simulation of 1F1B with unequal stages (an upper
bound of the simulated step, exact when the last stage is the slowest, and nearer than β·t_max); the
evaluator's breakdown; and the solver, whose objective now weighs Σ_u time_u (U = M·max + S·Σ + W·dp): the
tables match the evaluator on every assignment, and the oracle (its min-plus walk over recompute), CP-SAT and
a brute force over the table agree.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from parplan.costmodel.memory.runtime_memory import memory_for_usable
from parplan.costmodel.spec.assumptions import resolve_assumptions
from parplan.costmodel.schedules.bubble import stage_bubble_weights
from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.hardware import GIB
from parplan.costmodel.spec.spec import PlanSpec, Spec
from parplan.solver import cpsat, oracle
from parplan.solver.oracle import per_stage
from parplan.solver.cpsat import SolverControls
from parplan.solver.oracle import least_sum, solve_table
from parplan.solver.planner import optimize
from parplan.solver.problem import Problem
from parplan.solver.assignment_check import assignment_violations, evaluate_assignment
from parplan.solver.tables import KIB, Assignment
from parplan.frameworks.loader import validate_spec

from tests.brute_force import table_brute_force
from tests.conftest import sized
from tests.pipeline_sim import simulate_1f1b
from tests.solver_checks import check_plan

ONE = SolverControls(workers=1, deterministic=True, time_limit_s=60)



def _any_spec(data: dict) -> Spec:
    """A spec in the research space (``framework: any``; omitted is megatron-core, issue 24.2)."""
    return validate_spec({"framework": "any", **data})

def test_weights_by_hand():
    """1F1B, p = 4: β = 3 stage times. Stage times 1, 2, 3, 4: Σ - max = 1 + 2 + 3 = 6 = -1·4 + 1·10 (Alpa §5.1
    Eq. 2); the slowest-stage formula says 3·4 = 12. Interleaved v = 2 halves both; one stage has no bubble."""
    w_max, w_sum = stage_bubble_weights(3.0, 4)
    assert (w_max, w_sum) == (-1.0, 1.0)
    assert w_max * 4 + w_sum * (1 + 2 + 3 + 4) == 6.0
    assert stage_bubble_weights(3.0, 4, uneven=False) == (3.0, 0.0)
    assert stage_bubble_weights(1.5, 4) == (-0.5, 0.5)
    assert stage_bubble_weights(0.0, 1) == (0.0, 0.0)
    # equal stages: the two formulas agree
    w_max, w_sum = stage_bubble_weights(5.0, 16)
    assert w_max * 2.0 + w_sum * 16 * 2.0 == pytest.approx(5.0 * 2.0)


def test_simulated_1f1b_hand_case():
    """p = 2, m = 2, F = (1, 2), B = (2, 4): stage 0 F0 [0,1] F1 [1,2]; stage 1 F0 [1,3] B0 [3,7] F1 [7,9]
    B1 [9,13]; stage 0 B0 [7,9] B1 [13,15]: 15. Alpa: Σt + (m-1)·t_max = 3 + 6 + 6 = 15; slowest: 3·6 = 18."""
    assert simulate_1f1b([1, 2], [2, 4], 2) == 15.0
    w_max, w_sum = stage_bubble_weights(1.0, 2)  # 1F1B, p = 2: β = p - 1 = 1 stage time
    assert 2 * 6 + w_max * 6 + w_sum * (3 + 6) == 15.0


def test_uneven_bubble_bounds_a_simulated_1f1b_and_is_nearer_than_the_slowest_stage():
    """Random stage times (B = 2F, within ±25 % of each other), p ≤ 8, m ≥ p: the formula never under-states the
    simulated step, is exact when the last stage (the one with the head) is the slowest, and its error is well
    below the slowest-stage formula's."""
    rng = random.Random(7)
    err_new, err_old = [], []
    for _ in range(400):
        p = rng.randint(2, 8)
        m = rng.randint(p, 4 * p)
        F = [rng.uniform(0.8, 1.25) for _ in range(p)]
        B = [2 * f for f in F]
        t = [f + b for f, b in zip(F, B)]
        step = simulate_1f1b(F, B, m)
        w_max, w_sum = stage_bubble_weights(p - 1.0, p)
        new = m * max(t) + w_max * max(t) + w_sum * sum(t)
        old = (m + p - 1) * max(t)
        assert new >= step * (1 - 1e-12)
        err_new.append(new / step - 1)
        err_old.append(old / step - 1)
        F[-1] = max(F) * 1.1  # the last stage the slowest: exact
        B[-1] = 2 * F[-1]
        t = [f + b for f, b in zip(F, B)]
        assert m * max(t) + w_max * max(t) + w_sum * sum(t) == pytest.approx(simulate_1f1b(F, B, m))
    err_new.sort()
    err_old.sort()
    assert err_new[len(err_new) // 2] < 0.5 * err_old[len(err_old) // 2]
    assert err_new[-1] < err_old[-1]


SMALL = dict(name="s", hidden_size=512, ffn_hidden_size=1024, num_attention_heads=8, num_kv_heads=2,
             vocab_size=50000)


def test_evaluator_bubble_is_the_other_stages_times():
    """A 4-stage 1F1B plan with unequal stages [2, 5, 3, 2] and an interleaved one: the breakdown's bubble is
    β/(p-1)·(Σ t_stage - t_max) from the stage reports; the textbook rule (``uneven_stage_bubble: false``) is
    β·t_max; the step is m·t_max + bubble + DP either way."""
    spec = _any_spec(dict(model={**SMALL, "num_layers": 12}, training=dict(seq_len=2048, global_batch_size=8),
                                    cluster=dict(gpu="H100-SXM-80GB", num_gpus=4)))
    for plan, beta in ((PlanSpec(pp=4, stage_layers=[2, 5, 3, 2]), 3.0),
                       (PlanSpec(pp=4, vpp=2, schedule="interleaved", stage_layers=[2, 4, 4, 2]), 1.5)):
        ev = evaluate(spec, plan)
        t = [s.time_per_microbatch_s for s in ev.stages]
        assert len(set(t)) > 1
        assert ev.metrics.breakdown_s["bubble"] == pytest.approx(beta / 3 * (sum(t) - max(t)))
        m = ev.plan.num_microbatches
        assert ev.metrics.step_time_s == pytest.approx(m * max(t) + ev.metrics.breakdown_s["bubble"]
                                                       + max(s.dp_s for s in ev.stages))
        slow = evaluate(spec.model_copy(update={"assumptions": {"uneven_stage_bubble": False}}), plan)
        assert slow.metrics.breakdown_s["bubble"] == pytest.approx(beta * max(t))
        assert slow.metrics.step_time_s > ev.metrics.step_time_s


def test_least_sum_by_hand():
    """Three units, K = 2 steps, times per step count: u0 (1, 5, 9), u1 (2, 3, 100), u2 (4, 4, 4) with caps
    (2, 1, 2). Splits of 2: (2,0,0) 9+2+4 = 15, (1,1,0) 5+3+4 = 12, (1,0,1) 5+2+4 = 11, (0,1,1) 1+3+4 = 8,
    (0,0,2) 1+2+4 = 7 -- the least; (0,2,0) breaks u1's cap."""
    T = [[1, 5, 9], [2, 3, 100], [4, 4, 4]]
    total, q = least_sum(np.array(T, np.int64), np.array([2, 1, 2]), 2)
    assert total == 7 and list(q) == [0, 0, 2]
    total, q = least_sum(np.array(T, np.int64), np.array([2, 1, 0]), 2)  # u2 held at 0: (1, 1, 0) 12
    assert total == 12 and list(q) == [1, 1, 0]
    total, _ = least_sum(np.array(T, np.int64), np.array([0, 0, 1]), 2)
    assert total == int(oracle.LEAST_SUM_NONE)


def pressured(data: dict, plan: dict, share: float) -> Spec:
    """``data`` with the GPU memory set so that the usable memory lies ``share`` of the way from the even split's
    peak with every layer recomputed to its peak without recompute."""
    spec = _any_spec(data)
    low = evaluate(spec, PlanSpec(recompute="full", **plan)).metrics.peak_memory_gib
    high = evaluate(spec, PlanSpec(recompute="none", **plan)).metrics.peak_memory_gib
    a = resolve_assumptions(None)
    usable = low + (high - low) * share
    return _any_spec({**data, "cluster": {**data["cluster"],
                                                    "memory_gib": memory_for_usable(usable, a)}})


@st.composite
def pressured_tables(draw):
    """Small dense or MoE specs with full recompute under memory pressure, so each unit's least recompute
    (and with it Σ_u time_u) depends on the split."""
    pp = draw(st.sampled_from([2, 3, 4]))
    schedule = draw(st.sampled_from(["1f1b", "zb-h1", "interleaved", "dualpipe"]))
    if schedule == "dualpipe" and pp % 2:
        pp = 4
    v = 2 if schedule == "interleaved" else 1
    L = draw(st.integers(pp * v, max(pp * v, 8 if pp <= 3 else 7)))
    if v > 1:
        L -= L % v
    moe = draw(st.booleans())
    model = {**SMALL, "num_layers": L}
    if moe:
        model["moe"] = dict(num_experts=4, top_k=2, expert_ffn_hidden_size=512,
                            first_dense_layers=draw(st.sampled_from([0, 1])))
    split = draw(st.sampled_from(["per_stage", "per_stage", "first_last"]))
    data = dict(
        model=model,
        training=dict(seq_len=2048, global_batch_size=pp * draw(st.sampled_from([1, 2, 4]))),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=pp),
        search=dict(tp=[1], cp=[1], pp=[pp], vpp=[v] if v > 1 else None, micro_batch_size=[1],
                    schedules=[schedule], stage_split=split, recompute=["full"], zero_stages=[1],
                    uniform_recompute=draw(st.sampled_from([False, False, True]))))
    plan = dict(pp=pp, vpp=v, schedule=schedule, micro_batch_size=1, zero_stage=1)
    spec = pressured(data, plan, draw(st.sampled_from([0.1, 0.3, 0.5, 0.7, 0.9, 1.1])))
    problem = Problem.build(spec)
    if not problem.choices:
        return None
    return spec, problem, draw(st.integers(0, len(problem.choices) - 1))


WALKS = {"sums": 0, "tables": 0}
DP_HEAVY = [(0.02, 0.5), (0.5, 0.1), (0.5, 0.5)]  # (DP per layer, per unit) in shares of the times


@settings(max_examples=sized(25, 50), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(drawn=pressured_tables())
def test_tables_weigh_the_summed_times_and_the_solvers_agree(drawn):
    """Every assignment of the table: its U is the evaluator's step time (uneven bubble included) and its peak the
    evaluator's; the oracle, CP-SAT and a brute force over the table find the same least U."""
    assume(drawn is not None)
    spec, problem, i = drawn
    t = problem.table(i)
    n, L = t.num_units, t.num_layers
    if t.S:
        WALKS["tables"] += 1
    for layers in itertools.product(range(L + 1), repeat=n):
        if sum(layers) != L or any(l < lo or (l - lo) % t.grid for l, lo in zip(layers, t.layers_min)):
            continue
        for rec in itertools.product(*[range(l + 1) for l in layers]):
            x = Assignment(layers, rec, 0)
            if assignment_violations(t, x, 1 << 60):
                continue
            U, peak_kib = evaluate_assignment(t, x)
            ev = problem.evaluate(problem.plan(i, x))
            assert problem.scale.seconds(U) == pytest.approx(ev.metrics.step_time_s, rel=1e-4)
            assert peak_kib * KIB >= ev.metrics.peak_memory_gib * GIB - 1e-3
    cap = problem.cap_kib
    walk = per_stage.walk_with_sums
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return walk(*args, **kwargs)

    # then DP-heavy copies of the table (DP times comparable to compute, growing along the pipeline): where a
    # unit's DP time binds, δ trades against Σ (the walk's inner loop)
    heavy = [replace(t, dp_layer=t.dp_layer + (t.t_layer * per_layer).astype(np.int64),
                     dp_const=t.dp_const + (t.t_const * per_unit * np.arange(1, n + 1)).astype(np.int64))
             for per_layer, per_unit in DP_HEAVY]
    for weighted in [t] + heavy:
        with mock.patch.object(per_stage, "walk_with_sums", counted):
            ora = solve_table(weighted, cap)
        bf = table_brute_force(weighted, cap)
        cp = cpsat.solve(weighted, cap, ONE, 30)
        assert (bf is None) == (ora is None) == (cp.status == "INFEASIBLE"), (bf, ora, cp.status)
        if bf is not None:
            assert ora.U == cp.value == bf[0], (ora.U, cp.value, bf[0], weighted is t)
    WALKS["sums"] += bool(calls)
    best = solve_table(t, cap)
    if best is not None:
        check_plan(spec, problem.evaluate(problem.plan(i, best.x)))


def test_the_summed_walk_was_exercised():
    """The draws above reached tables that weigh Σ_u time_u, and the oracle's min-plus walk, many times."""
    assert WALKS["tables"] >= sized(15, 30), WALKS  # 25 examples: 23 tables, 14 summed walks
    assert WALKS["sums"] >= sized(5, 10), WALKS


def test_solver_moves_recompute_off_the_non_bottleneck_stages():
    """Under the uneven bubble recompute on a stage that is not the slowest still costs (it lengthens fill and
    drain). The planner's optimum equals the best plan of a brute force over the evaluator on a small spec that
    needs recompute, and re-evaluates to the same step time."""
    data = dict(model={**SMALL, "num_layers": 8, "vocab_size": 5000}, training=dict(seq_len=8192, global_batch_size=8),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=4),
                search=dict(tp=[1], cp=[1], pp=[4], micro_batch_size=[1], schedules=["1f1b"], recompute=["full"],
                            zero_stages=[1], memory_band=False))  # the memory is set by the ledger's peaks
    base = dict(pp=4, micro_batch_size=1, recompute="full", zero_stage=1)
    splits = [list(x) for x in itertools.product(range(1, 6), repeat=4) if sum(x) == 8]
    free = _any_spec(data)
    low = evaluate(free, PlanSpec(**base)).metrics.peak_memory_gib  # even split, every layer recomputed
    need = min(evaluate(free, PlanSpec(stage_layers=x, recompute_layers=[0] * 4, **base)).metrics.peak_memory_gib
               for x in splits)  # the least peak of any split without recompute
    a = resolve_assumptions(None)
    usable = (low + need) / 2
    spec = _any_spec({**data, "cluster": {**data["cluster"], "memory_gib": memory_for_usable(usable, a)}})
    res = optimize(spec, method="exhaustive", controls=ONE)
    other = optimize(spec, method="cpsat", controls=ONE)
    assert res.status == other.status == "OPTIMAL"
    best = res.plans[0]
    assert best.metrics.step_time_s == pytest.approx(other.plans[0].metrics.step_time_s, rel=1e-6)
    found = None
    for layers in splits:
        for rec in itertools.product(*[range(x + 1) for x in layers]):
            ev = evaluate(spec, PlanSpec(stage_layers=list(layers), recompute_layers=list(rec), **base))
            if ev.metrics.fits and (found is None or ev.metrics.step_time_s < found.metrics.step_time_s):
                found = ev
    assert found is not None and sum(found.plan.recompute_layers) > 0
    assert best.metrics.step_time_s <= found.metrics.step_time_s * (1 + 1e-6)
    assert best.metrics.step_time_s >= found.metrics.step_time_s * (1 - 1e-3)


def test_dp_time_traded_against_the_summed_times():
    """A case where the best plan raises the slowest DP time above its least value at the best τ to move layers
    onto the stage that needs no recompute (found by a search over DP-heavy tables; the oracle's inner δ walk):
    the oracle, CP-SAT and the brute force over the table agree."""
    model = {**SMALL, "num_layers": 8,
             "moe": dict(num_experts=4, top_k=2, expert_ffn_hidden_size=512, first_dense_layers=1)}
    spec = _any_spec(dict(
        model=model, training=dict(seq_len=2048, global_batch_size=6),
        # the tensor ledger's cap of the search that found the case (1.0497 GiB): the 0.5 GiB CUDA context and 5 %
        # fragmentation left out, and the 0.1875 GiB per stage of NCCL p2p and TE workspaces the ledger now holds
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=3, memory_gib=(3.2102627804404813 * 0.95 - 2 + 0.1875 + 0.5) / 0.95),
        search=dict(tp=[1], cp=[1], pp=[3], vpp=[2], micro_batch_size=[1], schedules=["interleaved"],
                    stage_split="per_stage", recompute=["full"], zero_stages=[1])))
    problem = Problem.build(spec)
    t = problem.table(0)
    n = t.num_units
    heavy = replace(t, dp_layer=t.dp_layer + (t.t_layer * 0.5).astype(np.int64),
                    dp_const=t.dp_const + (t.t_const * 0.1 * np.arange(1, n + 1)).astype(np.int64))
    cap = problem.cap_kib
    bf = table_brute_force(heavy, cap)
    ora = solve_table(heavy, cap)
    cp = cpsat.solve(heavy, cap, ONE, 30)
    assert bf is not None and sum(ora.x.recompute) + ora.x.dense > 0
    assert ora.U == cp.value == bf[0]
