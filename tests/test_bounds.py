"""solver/bounds.py: the relaxation bound of a stage table never exceeds the table's least U (the exhaustive
oracle's, solver/oracle), is infinite exactly where nothing fits, and with a DualPipe rank's least exposed
all-to-all it lies near the optimum on DeepSeek-V3 (where leaving the exposure out left it ~20 % below)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import small_specs
from parplan.client.spec_io import load_spec
from parplan.frameworks.loader import validate_spec
from parplan.solver.bounds import least_integer_reaching, relaxed_bound
from parplan.solver.oracle import solve_table
from parplan.solver.problem import Problem
from parplan.solver.tables import with_exposure

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _check_choice(p: Problem, i: int, cap: int) -> tuple[float, int | None]:
    t = p.table(i)
    bound = relaxed_bound(t, cap)
    sol = solve_table(t, cap)
    if sol is None:
        return bound, None
    assert bound <= sol.U, (t.choice, bound, sol.U)
    return bound, sol.U


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_specs())
def test_bound_never_exceeds_the_oracle_on_random_specs(spec):
    p = Problem.build(spec)
    assume(p.choices)
    for i in range(0, len(p.choices), max(1, len(p.choices) // 12)):
        for cap in (p.cap_kib, p.cap_kib // 3):
            bound, U = _check_choice(p, i, cap)
            if U is None:  # infinite only where nothing fits; finite may still be (the relaxation is weaker)
                continue
            assert math.isfinite(bound)


def test_dualpipe_bound_counts_the_least_exposed_all_to_all():
    """DeepSeek-V3 (examples/deepseek-v3-2048xh800.yaml) restricted to DualPipe TP4 PP4 EP256 micro-batch 1 ZeRO-1, selective recompute
    (the oracle sorts these tables in milliseconds): each
    choice's bound is a lower bound of its optimum and within 3 % of it, and above the bound of the same
    table with its exposure removed (ranks that hide every all-to-all)."""
    spec = load_spec(EXAMPLES / "deepseek-v3-2048xh800.yaml")
    raw = spec.model_dump(mode="json", exclude_none=True)
    raw["framework"] = "any"
    raw["search"] = dict(raw.get("search", {}), tp=[4], pp=[4], ep=[256], micro_batch_size=[1],
                         schedules=["dualpipe"], zero_stages=[1],
                         recompute=["selective"])
    p = Problem.build(validate_spec(raw))
    assert p.choices
    seen = 0
    for i in range(len(p.choices)):
        t = p.table(i)
        assert t.t_pair is not None and t.t_pair.max() > 0
        bound, U = _check_choice(p, i, p.cap_kib)
        if U is None:
            continue
        seen += 1
        assert bound >= 0.97 * U, (t.choice, bound / U)
        hidden = relaxed_bound(replace(t, t_pair=np.zeros_like(t.t_pair)), p.cap_kib)
        assert hidden < bound, (t.choice, hidden / U)
        # the search's first relaxation (the table less its exposure) is a weaker bound, and the table it is
        # built from gives back the full table once the exposure is added
        assert relaxed_bound(p.table_without_exposure(i), p.cap_kib) <= bound
        assert p.table_without_exposure(i).t_pair is None
        assert all(np.array_equal(x, y) for x, y in zip(_arrays(t), _arrays(with_exposure(
            p.table_without_exposure(i), p.costs(i)))))
    assert seen >= 1


def _arrays(t):
    return [t.t_pair, t.pair_first, t.t_split, t.t_layer, t.t_const, t.m_layer, t.m_const, t.m_saved]


def _bisection(reached, low: float, high: float) -> float:
    """The reference least_integer_reaching replaces: halving (low, high] one τ at a time."""
    while high - low > 1.0:
        mid = float(np.floor((low + high) / 2))
        if reached(np.array([mid]))[0]:
            high = mid
        else:
            low = mid
    return high


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**6, 10**6), st.integers(1, 10**12), st.integers(0, 10**12))
def test_integer_search_gives_the_bisections_answer(low, width, threshold):
    """least_integer_reaching finds what bisection finds for every threshold predicate τ ≥ t within (low, high]."""
    high = low + width
    t = low + threshold % (width + 1)
    reached = lambda tau: np.asarray(tau) >= t  # noqa: E731
    assert least_integer_reaching(reached, float(low), float(high)) == _bisection(reached, float(low), float(high))


def test_a_unit_that_cannot_hold_its_least_layers_makes_the_bound_infinite():
    spec = load_spec(EXAMPLES / "llama3-70b-64xh100.yaml")
    p = Problem.build(spec)
    t = p.table(0)
    assert math.isinf(relaxed_bound(t, 0))
    assert solve_table(t, 0) is None
