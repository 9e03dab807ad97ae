"""solver/relaxation_small.py: the relaxation of a small table in Python floats equals bounds.relaxation_parts, bit for
bit (every part, None included), on random specs' tables (MoE, paired schedules, trimmed chunks, small memories,
recompute or not) at caps from the budget's down to nothing fitting, and on Llama-3 70B's deep pipelines."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmarks.solver_speed import LLAMA8B
from tests.conftest import sized, small_specs
from parplan.frameworks.loader import validate_spec
from parplan.solver import bounds
from parplan.solver.problem import Problem
from parplan.solver.relaxation_small import SMALL_UNITS, misfit, relaxation_parts
from parplan.solver.table_builder import table_floats

SETTINGS = settings(max_examples=sized(15, 60), deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CAP_SHARES = tuple(k / 32 for k in range(41))  # from nothing fitting to a quarter past the budget's cap


def same(x, y) -> bool:
    """Equal parts: None both, or every float equal (inf to inf)."""
    return x is None and y is None or (x is not None and y is not None and all(
        a == b or (math.isinf(a) and math.isinf(b) and a == b) for a, b in zip(x, y)))


def check_tables(p: Problem, every: int = 1, seen: list | None = None) -> int:
    """Every ``every``-th choice's tables (with and without the exposure) at each cap share: the same parts both ways,
    and None wherever the float part's memory terms say nothing fits (relaxation_small.misfit, which Problem reads
    before it builds a table); the number of small tables checked (``seen``: the misfits counted into its first)."""
    checked = 0
    moe = p.spec.model.moe
    for i in range(0, len(p.choices), every):
        f = table_floats(p.costs(i), p.num_layers, moe.first_dense_layers if moe else 0, moe is not None,
                         p.options.stage_split, p.options.recompute_all_layers)
        for t in {id(t): t for t in (p.table_without_exposure(i), p.table(i))}.values():
            for share in CAP_SHARES:
                cap = int(p.cap_kib * share)
                numpy_parts = bounds.relaxation_parts(t, cap)
                assert same(relaxation_parts(t, cap), numpy_parts), (t.choice, cap)
                if misfit(f, p.choices[i].recompute, cap, p.num_layers):
                    assert numpy_parts is None, (t.choice, cap)
                    if seen is not None:
                        seen[0] += 1
            checked += t.t_pair is None and t.num_units <= SMALL_UNITS
    return checked


@SETTINGS
@given(spec=small_specs(), data=st.data())
def test_the_same_parts_as_numpy_on_random_specs(spec, data):
    p = Problem.build(spec)
    assume(check_tables(p, max(1, len(p.choices) // 20)))


def test_the_same_parts_on_deep_pipelines():
    """Llama-3 70B (80 layers) on 64 GPUs, 4K: 1 to 32 stages, interleaved, recompute and not."""
    spec = validate_spec({"model": {**LLAMA8B, "num_layers": 80, "hidden_size": 8192, "ffn_hidden_size": 28672,
                                    "num_attention_heads": 64, "num_kv_heads": 8},
                          "training": {"seq_len": 4096, "global_batch_size": 128},
                          "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 64, "gpus_per_node": 8},
                          "search": {"tp": [4, 8], "micro_batch_size": [1]}})
    p, seen = Problem.build(spec), [0]
    assert check_tables(p, max(1, len(p.choices) // 60), seen) > 50 and seen[0] > 50
    assert {t.num_units for t in (p.table(i) for i in range(len(p.choices)))} >= {2, 4, 8, 16}


def test_a_table_with_an_exposure_or_past_the_size_is_numpy_s():
    """Tables it does not form itself are handed to bounds.relaxation_parts (the exposure table's minima)."""
    calls = []
    original = bounds.relaxation_parts
    try:
        bounds.relaxation_parts = lambda t, cap: calls.append(t) or original(t, cap)
        t = Problem.build(validate_spec({"model": LLAMA8B, "training": {"seq_len": 4096, "global_batch_size": 64},
                                         "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8}})
                          ).table(0)
        relaxation_parts(t, 10**9)
        assert calls == []
        from dataclasses import replace
        relaxation_parts(replace(t, t_pair=np.zeros((t.num_units, t.num_layers + 1), np.int64)), 10**9)
        assert len(calls) == 1
    finally:
        bounds.relaxation_parts = original


def test_the_same_parts_with_leading_dense_layers():
    """An MoE model whose first stage recomputes leading dense layers (their own rate of time per KiB saved) under
    memories where recomputation binds."""
    model = {**LLAMA8B, "num_layers": 16, "moe": {"num_experts": 16, "top_k": 2, "expert_ffn_hidden_size": 1024,
                                                  "first_dense_layers": 3}}
    checked = 0
    for memory_gib in (24, 40, 80):
        spec = validate_spec({"model": model, "training": {"seq_len": 8192, "global_batch_size": 32},
                              "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8,
                                          "memory_gib": memory_gib},
                              "search": {"recompute": ["full"], "micro_batch_size": [1, 2]}})
        p = Problem.build(spec)
        assert any(t.k_dense and t.m_saved_dense for t in (p.table(i) for i in range(len(p.choices))))
        checked += check_tables(p, max(1, len(p.choices) // 40))
    assert checked > 20
