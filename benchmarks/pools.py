"""Plans on heterogeneous pools (issue 21): the CP-SAT stage → pool model's time to a proven optimum, its answer
against the same GPUs used one pool at a time, and (on the small specs) against the exhaustive enumeration.

    python benchmarks/pools.py [--out FILE]

Scenarios: the tests' 6-layer model on 4 H100 + 4 A100 (a mixed plan wins), the same with the A100s slowed to
30 TFLOP/s (left idle), and ``examples/pools/llama3-8b-h100-a100.yaml`` (8 + 8) and
``examples/pools/llama3-70b-h100-a100.yaml`` (32 + 32), each in the research space (``framework: any``: ZB-H1
too) and under its default framework, megatron-core (1F1B, its memory conventions). Each is planned with ``optimize(spec)`` (deterministic,
one worker, top 1: the pool model plus the placement explanation, which solves once more per idle pool); "alone"
plans each pool's GPUs by themselves with the ordinary planner under the scenario's framework (under ``any`` the
whole homogeneous space: interleaved, DualPipe and all, which the pool model does not search). Wall and CPU seconds are printed: the
machine's two cores are shared, so wall time includes waiting for them. Under the 6-layer mixed scenario and the
8B under megatron-core a line gives the frontier of step time against each pool's GPUs (``--pareto gpus``).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def scenarios():
    from parplan import load_spec
    from tests.solver.pools.test_space import A100, H100, spec_of

    yield "6-layer, 4 H100 + 4 A100", spec_of([H100, A100]), True
    yield "6-layer, 4 H100 + 4 A100 @30 TFLOP/s", spec_of([H100, {**A100, "peak_bf16_tflops": 30.0}]), True
    from parplan.frameworks.compare import spec_for_framework

    for name, path in (("llama3-8b, 8 H100 + 8 A100", "examples/pools/llama3-8b-h100-a100.yaml"),
                       ("llama3-70b, 32 H100 + 32 A100", "examples/pools/llama3-70b-h100-a100.yaml")):
        spec = load_spec(str(REPO / path))  # the default framework, megatron-core
        yield f"{name} (any)", spec_for_framework(spec, "any"), False
        yield f"{name} (megatron-core)", spec, False


def alone(spec, k: int):
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    data = spec.model_dump(mode="json", exclude_none=True)
    data["cluster"] = {"pools": [data["cluster"]["pools"][k]]}
    got = optimize(validate_spec(data), controls=SolverControls(deterministic=True))
    return got.plans[0].metrics.step_time_s if got.plans else None


def frontier_line(spec) -> str:
    """``--pareto gpus`` on pools (solver/pools/frontier.py): its points, time and the fastest point's usage."""
    from parplan.solver.pools.frontier import pool_frontier

    w0, c0 = time.perf_counter(), time.process_time()
    front = pool_frontier(spec)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    fastest = min(front.points, key=lambda p: p.key[0])
    fewest = min(front.points, key=lambda p: (sum(p.gpus_per_pool), p.key[0]))
    return (f"frontier (step time x GPUs per pool): {len(front.points)} points, proven {front.stats.proven}, "
            f"wall {wall:.2f} s, CPU {cpu:.2f} s; fastest {fastest.key[0]:.4g} s on {list(fastest.gpus_per_pool)} "
            f"GPUs, fewest {list(fewest.gpus_per_pool)} at {fewest.key[0]:.4g} s")


def main(argv=None) -> int:
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = [f"# benchmarks/pools.py on {platform.machine()}, Python {platform.python_version()}",
             "scenario | status | wall s | CPU s | choices (solved) | step s | stage pools, layers | "
             "pool 0 alone | pool 1 alone | vs better alone | exhaustive"]
    walls = []
    for name, spec, small in scenarios():
        w0, c0 = time.perf_counter(), time.process_time()
        got = optimize(spec, controls=SolverControls(deterministic=True))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        walls.append(wall)
        best = got.plans[0]
        a0, a1 = alone(spec, 0), alone(spec, 1)
        ref = min(x for x in (a0, a1) if x is not None)
        exh = "-"
        if small:
            e = optimize(spec, method="exhaustive", controls=SolverControls(deterministic=True))
            exh = "same" if abs(e.plans[0].metrics.step_time_s / best.metrics.step_time_s - 1) < 1e-6 else "DIFFERS"
        fmt = lambda x: "-" if x is None else f"{x:.4g}"  # noqa: E731
        lines.append(f"{name} | {got.status} | {wall:.2f} | {cpu:.2f} | {got.stats.choices_total} "
                     f"({got.stats.choices_searched}) | {best.metrics.step_time_s:.4g} | {best.plan.stage_pools} "
                     f"{best.plan.stage_layers} TP{best.plan.tp} PP{best.plan.pp} DP{best.plan.dp} "
                     f"{best.plan.schedule} | {fmt(a0)} | {fmt(a1)} | "
                     f"{(best.metrics.step_time_s / ref - 1) * 100:+.1f} % | {exh}")
        for line in got.placement or []:
            lines.append(f"    {line}")
        if name == "6-layer, 4 H100 + 4 A100" or name.endswith("8 A100 (megatron-core)"):
            lines.append(f"    {frontier_line(spec)}")
    ordered = sorted(walls)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    lines.append(f"two-pool optimize wall s over {len(walls)} scenarios: median {median:.2f}, max {max(walls):.2f} "
                 f"(issue 21 goal: median <= 2 s)")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
