#!/usr/bin/env python3
"""The search under the step order (solver/step_order_search.py) on benchmarks/solver_speed.py's scenarios, beside
today's closed-form search of the same problem (issue 39 item 1: its cost and its answers).

    python benchmarks/step_order_search.py [--only TEXT] [--skip TEXT] [--top K] [--limit S]
    python benchmarks/step_order_search.py --only DeepSeek --bounds   # how many paired choices each bound leaves

Per scenario: the closed-form search's status, objective, its best plan re-read by the step-order objective and CPU
seconds (Searcher.best, deterministic CP-SAT), then the step-order search's status, objective (the best plan's step
order, or its closed form where not paired), bound, paired choices solved and CPU seconds (each on a fresh Problem
from the spec; the second call reads the process's warm cost cache, solver/warm_cache.py, so compare its CPU time
with the first only where it is far larger)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(name: str, raw: dict, k: int, limit: float) -> None:
    from parplan.costmodel.evaluation.prediction_band import with_memory_band
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.completion import pinned_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.deadline import call_limits
    from parplan.solver.problem import Problem
    from parplan.solver.search import Searcher
    from parplan.solver.step_order_search import best_by_step_order, objective_s

    spec = pinned_spec(with_memory_band(validate_spec(raw)))
    controls = SolverControls(time_limit_s=limit, deterministic=True)
    for form in ("closed form", "step order"):
        c0, w0 = time.process_time(), time.perf_counter()
        deadline = w0 + limit
        with call_limits(deadline):
            problem = Problem.build(spec, deadline=deadline)
            s = Searcher(problem, "cpsat", controls, deadline)
            if form == "closed form":
                out = s.best(problem.cap_kib, k)
                value = problem.scale.seconds(out.found[0].U) if out.found else None
                e = problem.evaluation(out.found[0].row_index, out.found[0].x) if out.found else None
                extra = f"re-read by the objective {objective_s(e):.4f} s" if e is not None else ""
            else:
                out = best_by_step_order(s, problem.cap_kib, k)
                e = out.plans[0] if out.plans else None
                value = objective_s(e) if e is not None else None
                extra = f"bound {out.bound_s:.4f} s, {out.paired_solved} paired choices solved" \
                    if out.bound_s is not None else ""
        plan = "" if e is None else f"{e.plan.schedule.value} TP{e.plan.tp} PP{e.plan.pp} EP{e.plan.ep} " \
                                    f"m={e.plan.num_microbatches} {e.plan.stage_layers}"
        print(f"{name} top {k}, {form}: {out.status} {value if value is None else round(value, 4)} s {extra}; "
              f"{plan}; CPU {time.process_time() - c0:.2f} s, wall {time.perf_counter() - w0:.2f} s", flush=True)


def bounds(name: str, raw: dict) -> None:
    """The paired choices (memory aside) whose lower bound of the step order is below the closed-form optimum's step
    order, at each bound the step-order search tightens in turn (solver/step_order_search.py): the closed form's
    quick and mean-unit bounds over ``floor_divisor``, then the busy floor's relaxation."""
    from parplan.costmodel.evaluation.prediction_band import with_memory_band
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.completion import pinned_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.problem import Problem
    from parplan.solver.search import Searcher
    from parplan.solver.step_order_floor import floor_divisor
    from parplan.solver.step_order_search import objective_s

    P = Problem.build(pinned_spec(with_memory_band(validate_spec(raw))))
    out = Searcher(P, "cpsat", SolverControls(time_limit_s=600, deterministic=True)).best(P.cap_kib, 1)
    v = objective_s(P.evaluation(out.found[0].row_index, out.found[0].x))
    paired = [i for i, c in enumerate(P.choices) if c.schedule.paired and P.quick_mem_kib[i] <= P.cap_kib]
    div = {i: floor_divisor(P.choices[i], P.assumptions) for i in paired}
    quick = [i for i in paired if P.scale.seconds(float(P.quick_lb[i])) / div[i] < v]
    mean = [i for i in quick if P.scale.seconds(max(float(P.quick_lb[i]), P.mean_bound(i))) / div[i] < v]
    floor = [i for i in mean if P.scale.seconds(P.relaxed_bound(i, P.cap_kib, floor=True)) < v]
    closed = [i for i in paired if P.scale.seconds(max(float(P.quick_lb[i]), P.relaxed_bound(i, P.cap_kib)))
              < P.scale.seconds(out.found[0].U)]
    print(f"{name}: {len(P.choices)} choices, {len(paired)} paired; best objective {v:.4f} s; paired choices below it "
          f"by the quick bound over the divisor {len(quick)}, by the mean-unit bound over it {len(mean)}, by the busy "
          f"floor's relaxation {len(floor)}; (closed form: {len(closed)} paired choices' relaxations below its "
          f"optimum)", flush=True)


def main() -> None:
    import solver_speed as ss
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default=None, help="leave out the scenarios whose name contains this text")
    ap.add_argument("--top", type=int, default=1)
    ap.add_argument("--limit", type=float, default=120.0)
    ap.add_argument("--bounds", action="store_true", help="count the paired choices each bound leaves (no search)")
    args = ap.parse_args()
    for name, raw in ss.SCENARIOS:
        if args.only in name and (args.skip is None or args.skip not in name):
            bounds(name, raw) if args.bounds else run(name, raw, args.top, args.limit)


if __name__ == "__main__":
    main()
