"""The Pareto frontier of step time against GPUs per pool (``solver/pools/frontier.py``, issue 21) against a brute
force over the evaluator (every choice, stage → pool sequence, split and recompute vector: the least step time at
each usage vector, then the vectors no other beats with at most as many GPUs in every pool), on random small two-
and three-pool specs; the ``min_gpus`` answer read off it; both through ``optimize`` and the CLI."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from parplan.client.cli import app
from parplan.client.report import gpus_per_pool
from parplan.costmodel.evaluation.pools import evaluate_pools, pool_usage
from parplan.solver.cpsat import SolverControls
from parplan.solver.planner import optimize
from parplan.solver.pools.frontier import STRICT_RTOL, least_gpus, pool_frontier

from tests.solver.pools.test_space import A100, H100, best_per_sequence, spec_of
from tests.conftest import sized

SEEN = {"points": 0, "multi_point": 0, "idle_pool_point": 0}


def brute_frontier(spec) -> dict[tuple[int, ...], float]:
    """usage vector -> least step time, for the vectors on the frontier (the brute force of the docstring)."""
    least: dict[tuple[int, ...], float] = {}
    for (c, seq), t in best_per_sequence(spec).items():
        u = tuple(pool_usage(spec, c, list(seq)))
        least[u] = min(t, least.get(u, t))
    return {u: t for u, t in least.items()
            if not any(v != u and all(x <= y for x, y in zip(v, u)) and s <= t * (1 + STRICT_RTOL)
                       for v, s in least.items())}


@st.composite
def pooled_specs(draw):
    n_pools = draw(st.sampled_from([2, 3]))
    sizes = [draw(st.sampled_from([1, 2, 4])) for _ in range(n_pools)]
    assume(sum(sizes) <= 8)  # the brute force's cost grows with every GPU count it visits
    pools = [dict(gpu=draw(st.sampled_from(["H100-SXM-80GB", "A100-SXM-80GB"])), num_gpus=n, gpus_per_node=n,
                  peak_bf16_tflops=draw(st.sampled_from([100.0, 300.0, 900.0])),
                  memory_gib=draw(st.sampled_from([1.0, 1.5, 3.0, 80.0]))) for n in sizes]
    framework = draw(st.sampled_from(["any", "megatron-core"]))
    return spec_of(pools, num_layers=draw(st.integers(3, 6)), batch=draw(st.sampled_from([4, 8])),
                   framework=framework)


@settings(max_examples=sized(8, 15), deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(spec=pooled_specs())
def test_frontier_equals_the_brute_force(spec):
    want = brute_frontier(spec)
    got = pool_frontier(spec)
    assert got.stats.proven
    points = {p.gpus_per_pool: p.key[0] for p in got.points}
    SEEN["points"] += len(points)
    SEEN["multi_point"] += len(points) > 1
    SEEN["idle_pool_point"] += any(0 in u for u in points)
    assert sorted(points) == sorted(want)
    for u, t in points.items():
        assert t == pytest.approx(want[u], rel=1e-6)
    for p in got.points:  # each point is the evaluator's own plan, on the pools it says
        ev = evaluate_pools(spec, p.evaluation.plan, list(p.stage_pools))
        assert not ev.violations and ev.metrics.step_time_s == p.key[0]
        assert tuple(pool_usage(spec, p.evaluation.plan.to_choice(), list(p.stage_pools))) == p.gpus_per_pool


def test_the_drawn_frontiers_were_not_vacuous():
    if sum(SEEN.values()) == 0:
        pytest.skip("run with test_frontier_equals_the_brute_force (it fills the tally)")
    assert SEEN["multi_point"] >= 5 and SEEN["idle_pool_point"] >= 5, SEEN


def test_min_gpus_is_the_least_total_meeting_the_target():
    spec = spec_of([H100, A100])
    frontier = pool_frontier(spec)
    want = brute_frontier(spec)
    slowest, fastest = max(want.values()), min(want.values())
    target = (slowest + fastest) / 2
    best = least_gpus(frontier, target)
    meets = [u for u, t in want.items() if t <= target]
    assert best is not None and sum(best.gpus_per_pool) == min(sum(u) for u in meets)
    assert least_gpus(frontier, fastest * 0.5) is None
    got = optimize(spec.model_copy(update={"objective": "min_gpus", "target_step_time_s": target}),
                   controls=SolverControls(deterministic=True))
    assert got.status == "OPTIMAL" and got.plans[0].plan.num_gpus == sum(best.gpus_per_pool)
    assert got.plans[0].metrics.step_time_s <= target


def test_optimize_and_the_cli_print_the_per_pool_frontier(tmp_path):
    spec = spec_of([H100, A100])
    got = optimize(spec, pareto="gpus", controls=SolverControls(deterministic=True))
    want = brute_frontier(spec)
    assert got.pareto_axis == "gpus" and len(got.pareto) == len(want)
    assert got.plans[0].metrics.step_time_s == pytest.approx(min(want.values()), rel=1e-6)
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    run = CliRunner().invoke(app, ["optimize", str(path), "--deterministic", "--pareto", "gpus", "--format", "json"])
    assert run.exit_code == 0, run.output
    data = json.loads(run.stdout)
    assert [e["plan"]["stage_pools"] for e in data["pareto"]] == [e.plan.stage_pools for e in got.pareto]
    per_pool = sorted(tuple(gpus_per_pool(e.plan, 2)) for e in got.pareto)
    assert per_pool == sorted(want)  # the JSON's points: their plans' stage_pools give each pool's GPUs
    table = CliRunner().invoke(app, ["optimize", str(path), "--deterministic", "--pareto", "gpus"])
    assert table.exit_code == 0, table.output
    assert "GPUs per pool" in table.stdout


def test_plot_of_a_pools_frontier_is_refused_in_one_line(tmp_path):
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump(spec_of([H100, A100]).model_dump(mode="json", exclude_none=True)))
    run = CliRunner().invoke(app, ["optimize", str(path), "--deterministic", "--pareto", "gpus", "--plot",
                                   str(tmp_path / "f.png")])
    assert run.exit_code == 2
    lines = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "one GPU axis per pool" in lines[0], run.stderr
