#!/usr/bin/env python3
"""Where one solver_speed scenario's top-1 call spends its time: wall-clock and CPU timers around the search's stages.

    python benchmarks/search_breakdown.py [--only DeepSeek] [--top 1]

Wraps Problem.build (the space and quick bounds), Problem.layer_bounds (the layer bounds of a chunk of the queue's
candidates: its calls counted as the choices it bounds), Problem.mean_bound (the mean-unit bound from
a choice's full costs), Problem.table_without_exposure (a choice's integer table less a DualPipe rank's paired
exposure, which the search relaxes first), Problem.table (the table with it, its table less the exposure included:
the timers nest), Searcher.bound (the full continuous
relaxation, its table included) and Searcher._cpsat (one per-choice CP-SAT solve) with timers, then runs the scenario as
benchmarks/solver_speed.py does (CP-SAT, 2 workers). The timers add a little overhead; the total is the call's wall
time with them. Each stage's CPU seconds (``time.process_time``: this process's threads, CP-SAT's workers included)
beside its wall seconds, and the call's CPU time and the 1-minute load: on this 2-core machine shared by several
agents the wall times move 2-3x with the load, the CPU times much less. It is the process's first call, its imports
done before the timers start (as solver_speed's wall time).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    import solver_speed as ss
    from parplan.frameworks.loader import validate_spec
    from parplan.solver import cpsat, planner, problem, search  # noqa: F401  (imported before the CPU timer starts)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="DeepSeek", help="the scenario whose name contains this text")
    ap.add_argument("--top", type=int, default=1)
    args = ap.parse_args(argv)
    seconds, calls, cpu = collections.Counter(), collections.Counter(), collections.Counter()

    def timed(owner, name: str, key: str) -> None:
        f = getattr(owner, name)

        setattr(owner, name, lambda *a, **k: _timed_call(f, seconds, calls, key, *a, cpu=cpu, **k))

    saved = [(owner, n, owner.__dict__[n]) for owner, n in ((problem.Problem, "layer_bounds"),
             (problem.Problem, "mean_bound"), (problem.Problem, "table"), (problem.Problem, "build"),
             (problem.Problem, "table_without_exposure"),
             (search.Searcher, "bound"), (search.Searcher, "_cpsat"))]
    try:
        for name, key in (("layer_bounds", "layer bound"), ("mean_bound", "mean-unit bound"),
                          ("table_without_exposure", "table less its exposure"), ("table", "table")):
            timed(problem.Problem, name, key)
        timed(search.Searcher, "bound", "relaxation (tables included)")
        timed(search.Searcher, "_cpsat", "CP-SAT solve")
        build = problem.Problem.build
        problem.Problem.build = staticmethod(lambda *a, **k: _timed_call(build, seconds, calls, "build", *a, cpu=cpu,
                                                                         **k))
        name, raw = next(s for s in ss.SCENARIOS if args.only in s[0])
        cpu0 = time.process_time()
        res, wall = ss._solve(validate_spec(raw), "cpsat", args.top, 2)
        cpu_s = time.process_time() - cpu0
    finally:  # the classes as they were (the smoke test runs this in the test process)
        for owner, n, attr in saved:
            setattr(owner, n, attr)
    print(f"{name}: top {args.top} {res.status} in {wall:.2f} s ({cpu_s:.2f} s CPU, this process's; load "
          f"{os.getloadavg()[0]:.1f})")
    for key in ("build", "layer bound", "mean-unit bound", "table less its exposure", "table",
                "relaxation (tables included)", "CP-SAT solve"):
        print(f"  {key:30s} {calls[key]:7d} calls {seconds[key]:7.2f} s {cpu[key]:7.2f} s CPU")
    if res.plans:
        legal, open_ = _choices_below(validate_spec(raw), res.plans[0].metrics.step_time_s)
        print(f"  choices: {legal} legal, {open_} within the memory bound with a quick bound below the optimum")
    return 0


def _choices_below(spec, optimum_s: float) -> tuple[int, int]:
    """(legal choices, those whose quick bounds (solver/bounds.py quick_bounds: the model FLOPs at the fastest rate,
    the mean stage's model states) are within the usable memory and below ``optimum_s``): what the search must
    bound past its quick bound."""
    from parplan.costmodel.compute.architecture import Architecture
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.costmodel.spec.hardware import resolve_gpu
    from parplan.solver.bounds import quick_bounds
    from parplan.solver.problem import Problem
    p = Problem.build(spec)
    gpu, a = resolve_gpu(spec.cluster), resolve_assumptions(spec.assumptions)
    step_s, mem_kib = quick_bounds(spec, p.choices, gpu, a, Architecture(spec.model))
    return len(p.choices), int(((mem_kib <= p.cap_kib) & (step_s < optimum_s)).sum())


def _timed_call(f, seconds, calls, key, *a, cpu, **k):
    t0, c0 = time.perf_counter(), time.process_time()  # (CPU seconds: the machine's load moves the wall times)
    try:
        return f(*a, **k)
    finally:
        seconds[key] += time.perf_counter() - t0
        cpu[key] += time.process_time() - c0
        calls[key] += len(a[1]) if key == "layer bound" else 1  # (Problem.layer_bounds(self, idx): its choices)


if __name__ == "__main__":
    sys.exit(main())
