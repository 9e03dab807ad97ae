"""Solver controls the service relies on: streaming improving plans, cancellation, time limits, status as data."""

import threading
import time
from pathlib import Path

import pytest

from parplan.library.spec_io import load_spec
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize

pytestmark = pytest.mark.usefixtures("fresh_heap")  # timed calls: the long suite's heap is not theirs to collect

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_improving_plans_are_streamed_as_cost_model_evaluations():
    spec = load_spec(EXAMPLES / "llama3-70b-64xh100.yaml")
    seen = []
    result = optimize(spec, controls=SolverControls(workers=1, deterministic=True),
                      on_solution=lambda ev, objective_s, bound_s: seen.append((ev, objective_s, bound_s)))
    assert result.status == "OPTIMAL"
    assert seen, "CP-SAT reported no improving solution"
    assert all(isinstance(ev, Evaluation) and not ev.violations for ev, _, _ in seen)
    objectives = [o for _, o, _ in seen]
    assert objectives == sorted(objectives, reverse=True)  # each streamed plan improves on the last
    assert abs(objectives[-1] - result.plans[0].metrics.step_time_s) <= 1e-3 * objectives[-1]


def test_cancellation_stops_the_search_and_returns_status_as_data():
    spec = load_spec(EXAMPLES / "llama3-70b-64xh100.yaml")
    cancel = threading.Event()
    cancel.set()  # cancelled before the solver starts: it must stop at once, not raise
    t0 = time.perf_counter()
    result = optimize(spec, controls=SolverControls(workers=1, cancel=cancel, time_limit_s=60))
    assert time.perf_counter() - t0 < 30
    assert result.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN")
    if result.status == "FEASIBLE":
        assert result.plans and result.stats.best_bound is not None and result.stats.gap is not None


def test_a_tiny_time_limit_gives_status_not_an_exception():
    spec = load_spec(EXAMPLES / "deepseek-v3-2048xh800.yaml")
    result = optimize(spec, controls=SolverControls(workers=1, time_limit_s=0.01))
    assert result.status in ("OPTIMAL", "FEASIBLE", "UNKNOWN")
    for ev in result.plans:
        assert not ev.violations


@pytest.mark.usefixtures("fresh_warm_cache")  # a space the warm cache kept from an earlier call is not built again
def test_a_cancelled_call_stops_while_building_the_space():
    """The cancel event is looked at while the space is enumerated too, not only by the search: cancelled before
    the call, DeepSeek-V3's 29.6k-choice space is not built (no choice counted) and the answer is UNKNOWN."""
    spec = load_spec(EXAMPLES / "deepseek-v3-2048xh800.yaml")
    cancel = threading.Event()
    cancel.set()
    result = optimize(spec, controls=SolverControls(workers=1, cancel=cancel, time_limit_s=60))
    assert result.status == "UNKNOWN" and result.plans == []
    assert result.stats.choices_total == 0
