"""The memory frontier: exact (same points as a plain ε-constraint sweep with bisection) and non-dominated."""

from pathlib import Path

import pytest

from parplan.library.spec_io import load_spec
from parplan.solver.cpsat import SolverControls
from parplan.solver.frontier import memory_frontier
from parplan.solver.planner import optimize
from parplan.solver.search import Searcher
from parplan.solver.tables import MIB_KIB
from parplan.solver.problem import Problem
from parplan.frameworks.loader import validate_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _plain_sweep(searcher) -> list:
    """The textbook ε-constraint sweep: min U under the cap, then the least peak (bisection over all
    choices) at that U, then the cap just below it -- no caches, no reuse."""
    P = searcher.p
    cap, points = P.cap_kib, []
    while cap > 0:
        out = searcher.best(cap, 1)
        if not out.found:
            break
        peak = searcher.min_peak(upper_U=out.found[0].U)
        at = searcher.best(min(cap, peak * MIB_KIB), 1).found[0]
        points.append(P.evaluate(P.plan(at.row_index, at.x)))
        cap = (peak - 1) * MIB_KIB
    return points


def _key(ev):
    return round(ev.metrics.step_time_s, 9), round(ev.metrics.peak_memory_gib, 9)


SMALL = [
    {"model": {"num_layers": 8, "hidden_size": 1024, "ffn_hidden_size": 4096, "num_attention_heads": 16,
               "num_kv_heads": 4, "vocab_size": 32000},
     "training": {"seq_len": 4096, "global_batch_size": 32},
     "cluster": {"gpu": "A100-SXM-80GB", "num_gpus": 8, "memory_gib": 6.0}},
    {"model": {"num_layers": 6, "hidden_size": 512, "ffn_hidden_size": 2048, "num_attention_heads": 8,
               "vocab_size": 50000, "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 1024}},
     "training": {"seq_len": 2048, "global_batch_size": 16},
     "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 4, "memory_gib": 3.0},
     "search": {"micro_batch_size": [1, 2]}},
]


@pytest.mark.parametrize("raw", SMALL, ids=["dense-8gpu", "moe-4gpu"])
def test_frontier_equals_a_plain_sweep_on_small_specs(raw):
    spec = validate_spec(raw)
    s = Searcher(Problem.build(spec), "exhaustive", SolverControls())
    fast = memory_frontier(s)
    plain = _plain_sweep(Searcher(Problem.build(spec), "exhaustive", SolverControls()))
    assert len(fast) >= 2
    assert [_key(e) for e in fast] == [_key(e) for e in plain]


def test_frontier_points_are_non_dominated_and_feasible():
    spec = load_spec(EXAMPLES / "seed-textbook-70b-8k.yaml")
    res = optimize(spec, method="exhaustive", pareto="memory")
    pts = res.pareto
    assert len(pts) >= 5 and res.pareto_axis == "memory"
    assert all(not e.violations for e in pts)
    times = [e.metrics.step_time_s for e in pts]
    mems = [e.metrics.peak_memory_gib for e in pts]
    assert times == sorted(times) and mems == sorted(mems, reverse=True)
    assert len(set(map(_key, pts))) == len(pts)
    assert abs(times[0] - res.plans[0].metrics.step_time_s) <= 1e-9 * times[0]  # the first point is the optimum
