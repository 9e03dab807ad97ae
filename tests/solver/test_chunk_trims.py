"""Interleaved plans whose end chunks are trimmed (issue 10: Llama-3.1 405B; issue 11: uneven first/last chunks).

126 layers on 16 stages of 8 virtual chunks do not fill whole chunks; Meta's split (Llama 3 report §3.3.2: one
layer fewer on the first and the last stage) is stage 0's first chunk and the last stage's last chunk one layer
short. The space enumerates such trims (``chunk_trims.chunk_trims``), the tables price them exactly, the plan carries
them as its ``pipeline_layout``, and the evaluator weighs every chunk's layers by the forwards it holds in flight.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from parplan.costmodel.evaluation.evaluate import evaluate
from parplan.costmodel.spec.hardware import GIB
from parplan.frameworks.layout import interleaved_inflight_chunks
from parplan.solver import cpsat
from parplan.solver.cpsat import SolverControls
from parplan.solver.oracle import solve_table
from parplan.solver.planner import optimize
from parplan.solver.problem import Problem
from parplan.solver.chunk_trims import chunk_trims, uniform_stage_layers, uniform_trims
from parplan.solver.assignment_check import assignment_violations, evaluate_assignment, unit_values
from parplan.solver.tables import KIB, Assignment
from parplan.frameworks.loader import validate_spec

from tests.brute_force import table_brute_force
from tests.solver_checks import check_plan

ONE = SolverControls(workers=1, deterministic=True, time_limit_s=60)


def test_trims_fill_whole_chunks():
    """(first, last) of 0 or 1 with first + last ≡ −L (mod v): 126 = 16·8 − 2."""
    assert chunk_trims(126, 16, 8, True) == [(1, 1)]
    assert chunk_trims(127, 16, 8, True) == [(0, 1), (1, 0)]
    assert chunk_trims(125, 16, 8, True) == []  # three layers short of whole chunks
    assert chunk_trims(80, 4, 6, True) == []  # 84 − 4
    assert chunk_trims(128, 16, 8, True) == [(0, 0)]
    assert chunk_trims(126, 16, 8, False) == []  # no per-chunk layouts: only layers that divide by vpp
    assert chunk_trims(126, 16, 2, False) == [(0, 0)]
    # 5 layers, 2 stages of 2 chunks: 2·2 − 5 < 0 → r = 3 (mod 2) = 1: one chunk one layer short
    assert chunk_trims(5, 2, 2, True) == [(0, 1), (1, 0)]
    # too few layers: 3 on 2 stages of 4 chunks needs 8 − 5 = 3 trimmed layers in two chunks of 1
    assert chunk_trims(3, 2, 4, True) == []


def test_uniform_trims_of_deepseek_v3():
    """61 layers (3 dense first) in 16 chunks of 4: stage 0's first chunk one layer short (its 3 dense layers) and the
    last chunk two (MTP and the loss). In 32 chunks of 2 (Megatron's "Et|(tt|)*30mL") the first chunk cannot hold
    the dense layers (model-chunk order puts two of them on stage 1, which the tables' stage 0 does not price): none;
    64 chunks of 1 cannot lose two either."""
    assert uniform_trims(61, 4, 4, 3) == [(1, 2)] and uniform_stage_layers(61, 4, 4, 1, 2) == [15, 16, 16, 14]
    assert uniform_trims(61, 2, 8, 3) == [(1, 2)] and uniform_stage_layers(61, 2, 8, 1, 2) == [31, 30]
    assert uniform_trims(61, 8, 2, 3) == [(1, 2)] and uniform_stage_layers(61, 8, 2, 1, 2) == [7] + [8] * 6 + [6]
    assert uniform_trims(61, 8, 4, 3) == [] and uniform_trims(61, 16, 2, 3) == []
    assert uniform_trims(61, 8, 4, 1) == [(1, 2)]  # one dense layer fits the first chunk's one layer
    assert uniform_trims(61, 16, 4, 0) == []  # q = 1: the last chunk cannot lack 2
    assert uniform_trims(64, 8, 2, 3) == []  # whole chunks: the per-stage search's even split
    assert uniform_trims(62, 4, 4, 3) == [(0, 2), (1, 1)]


def test_trimmed_choices_only_where_the_tables_are_exact():
    """A framework without per-chunk layouts gets no trims; a model with leading dense layers (MoE) only the
    uniform layout, whose per-stage counts its table fixes (the dense layers' share of stage 0's mean per-layer
    bytes is then a constant)."""
    base = dict(model=dict(name="m", num_layers=7, hidden_size=512, ffn_hidden_size=1024, num_attention_heads=8,
                           num_kv_heads=2, vocab_size=5000),
                training=dict(seq_len=1024, global_batch_size=8), cluster=dict(gpu="H100-SXM-80GB", num_gpus=2),
                search=dict(pp=[2], tp=[1], cp=[1], schedules=["interleaved"], vpp=[2]))
    trimmed = [c for c in Problem.build(validate_spec(base)).choices if c.first_chunk_trim + c.last_chunk_trim]
    assert trimmed and all(c.first_chunk_trim + c.last_chunk_trim == 1 for c in trimmed)
    moe = {**base, "model": {**base["model"], "moe": dict(num_experts=4, top_k=2, expert_ffn_hidden_size=512,
                                                          first_dense_layers=1)}}
    problem = Problem.build(validate_spec(moe))  # 7 layers in 4 chunks of 2: [1, 2] [2, 2] or [2, 2] [2, 1]
    assert {(c.first_chunk_trim, c.last_chunk_trim) for c in problem.choices} == {(0, 1), (1, 0)}
    assert all(list(problem.table(i).layers_fixed) == uniform_stage_layers(7, 2, 2, c.first_chunk_trim,
                                                                           c.last_chunk_trim)
               for i, c in enumerate(problem.choices))
    old = {**base, "framework": {"name": "megatron-core", "version": "0.12.0"}}  # before the layout flag
    assert Problem.build(validate_spec(old)).choices == []
    new = {**base, "framework": "megatron-core"}  # --pipeline-model-parallel-layout (core_v0.13.0)
    assert [c for c in Problem.build(validate_spec(new)).choices if c.first_chunk_trim + c.last_chunk_trim]


def test_trimmed_chunk_memory_by_hand():
    """Stage 0 of p = 2, v = 2, m = 4: Megatron's warm-up holds (2 − 0 − 1)·2 + (2 − 1)·2 + 1 = 5 chunk forwards,
    chunk 0 three of them, chunk 1 two (mean 2.5 per chunk). With 3 layers as [1, 2] (first chunk trimmed) the
    activations are (3·1 + 2·2)·a = 7a; at the mean they would be 2.5·3·a = 7.5a."""
    assert interleaved_inflight_chunks(2, 2, 4, 0) == [3, 2]
    spec = validate_spec(dict(
        model=dict(name="m", num_layers=5, hidden_size=512, ffn_hidden_size=1024, num_attention_heads=8,
                   num_kv_heads=2, vocab_size=5000),
        training=dict(seq_len=1024, global_batch_size=4), cluster=dict(gpu="H100-SXM-80GB", num_gpus=2),
        plan=dict(pp=2, vpp=2, schedule="interleaved", pipeline_layout=[[1, 2], [1, 1]])))
    even = spec.model_copy(update={"plan": spec.plan.model_copy(update={"pipeline_layout": [[2, 2], [1, 0]]})})
    a = evaluate(spec).stages[0].activations_gib
    b = evaluate(even).stages[0].activations_gib  # 4 layers as [2, 2]: 2.5·4 = 10 per-layer units
    assert a / b == pytest.approx(7 / 10, rel=1e-9)


SMALL = dict(name="s", hidden_size=512, ffn_hidden_size=1024, num_attention_heads=8, num_kv_heads=2,
             vocab_size=5000)


@st.composite
def trimmed_tables(draw):
    pp = draw(st.sampled_from([2, 3]))
    v = draw(st.sampled_from([2, 3]))
    L = draw(st.integers(pp * v - 1, 10))
    L += L % v == 0  # layers that do not fill whole chunks
    split = draw(st.sampled_from(["per_stage", "first_last"]))
    dense = draw(st.sampled_from([0, 0, 1, 2]))  # leading dense layers of an MoE model: the uniform layout only
    moe = {"moe": dict(num_experts=4, top_k=2, expert_ffn_hidden_size=512, first_dense_layers=dense)} if dense else {}
    spec = validate_spec(dict(
        model={**SMALL, "num_layers": L, **moe},
        training=dict(seq_len=2048, global_batch_size=pp * draw(st.sampled_from([1, 2]))),
        cluster=dict(gpu="H100-SXM-80GB", num_gpus=pp, memory_gib=draw(st.sampled_from([1.2, 1.6, 2.0, 3.0, 6.0]))),
        search=dict(tp=[1], cp=[1], pp=[pp], vpp=[v], micro_batch_size=[1], schedules=["interleaved"],
                    stage_split=split, recompute=draw(st.sampled_from([["none"], ["full"], ["none", "full"]])))))
    problem = Problem.build(spec)
    rows = [i for i, c in enumerate(problem.choices) if c.first_chunk_trim or c.last_chunk_trim]
    if not rows:
        return None
    return spec, problem, draw(st.sampled_from(rows))


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(drawn=trimmed_tables())
def test_trimmed_tables_match_the_evaluator_and_the_solvers_agree(drawn):
    """Every assignment of a trimmed choice (a dense model's per-stage trims, an MoE model's uniform layout with its
    leading dense layers on stage 0): the table's peak is the evaluator's (to the KiB rounding of its coefficients)
    and its objective is the evaluator's step time; the oracle, CP-SAT and a brute force over the table find the same
    least U."""
    assume(drawn is not None)
    spec, problem, i = drawn
    t = problem.table(i)
    n, L = t.num_units, t.num_layers
    for layers in itertools.product(range(L + 1), repeat=n):
        if sum(layers) != L or any(l < lo or (l - lo) % t.grid for l, lo in zip(layers, t.layers_min)):
            continue
        for rec in itertools.product(*[range(l + 1) for l in layers]) if t.choice.recompute == "full" else [(0,) * n]:
            x = Assignment(layers, rec, 0)
            if assignment_violations(t, x, 1 << 60):
                continue
            U, peak_kib = evaluate_assignment(t, x)
            ev = problem.evaluate(problem.plan(i, x))
            assert ev.violations == [] or not ev.metrics.fits, ev.violations
            assert peak_kib * KIB >= ev.metrics.peak_memory_gib * GIB - 1e-3
            assert peak_kib * KIB - ev.metrics.peak_memory_gib * GIB <= 16 * KIB * (L + 2)
            assert problem.scale.seconds(U) == pytest.approx(ev.metrics.step_time_s, rel=1e-4)
    cap = problem.cap_kib
    bf = table_brute_force(t, cap)
    ora = solve_table(t, cap)
    cp = cpsat.solve(t, cap, ONE, 30)
    assert (bf is None) == (ora is None) == (cp.status == "INFEASIBLE")
    if bf is not None:
        assert ora.U == cp.value == bf[0]
        check_plan(spec, problem.evaluate(problem.plan(i, ora.x)))


def test_llama405b_metas_degrees_find_metas_layout():
    """Meta's degrees (TP8 CP1 PP16 DP128, interleaved, micro-batch 1) on 16,384 H100: the best plan the model
    finds interleaves 8 chunks per stage with 126 layers as 7 / 8 × 14 / 7, stage 0's first chunk and the last
    stage's last chunk empty (the embedding and the head stand in for them), Meta's published split."""
    from benchmarks.acceptance import LLAMA405B, META_PLAN
    best = optimize(validate_spec({**LLAMA405B, "search": META_PLAN}), method="exhaustive").plans[0]
    p = best.plan
    assert (p.vpp, p.stage_layers[0], p.stage_layers[-1], sum(p.stage_layers)) == (8, 7, 7, 126)
    assert p.pipeline_layout[0][0] == 0 and p.pipeline_layout[-1][-1] == 0
    check_plan(validate_spec({**LLAMA405B, "search": META_PLAN}), best)


@pytest.mark.parametrize("num_layers", [5, 7])
def test_trimmed_full_recompute_tables_match_the_evaluator_per_stage(num_layers):
    """torchtitan recomputes every layer or none (full_recompute_counts 'all'): a trimmed chunk's missing layers
    are then checkpoints, so each stage's table memory is the evaluator's (to the KiB rounding) on every layout."""
    spec = validate_spec(dict(
        framework="torchtitan", model={**SMALL, "num_layers": num_layers},
        training=dict(seq_len=2048, global_batch_size=4), cluster=dict(gpu="H100-SXM-80GB", num_gpus=2),
        search=dict(tp=[1], cp=[1], pp=[2], vpp=[2], micro_batch_size=[1], schedules=["interleaved"],
                    recompute=["full"])))
    problem = Problem.build(spec)
    rows = [i for i, c in enumerate(problem.choices) if c.first_chunk_trim or c.last_chunk_trim]
    assert rows and all(problem.table(i).recompute_all for i in rows)
    checked = 0
    for i in rows:
        t = problem.table(i)
        for layers in itertools.product(range(num_layers + 1), repeat=t.num_units):
            x = Assignment(layers, (0,) * t.num_units, 0)
            if assignment_violations(t, x, 1 << 60):
                continue
            _, mem_kib, _ = unit_values(t, x)
            ev = problem.evaluate(problem.plan(i, x))
            assert all(0 <= mem_kib[u] * KIB - s.memory_gib * GIB <= 16 * KIB for u, s in enumerate(ev.stages))
            checked += 1
    assert checked
