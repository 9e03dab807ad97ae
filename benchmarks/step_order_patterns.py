#!/usr/bin/env python3
"""DualPipe choices of one scenario of benchmarks/solver_speed.py solved alone under the step order, below a threshold
(solver/step_order_branch.py's branch and bound, then solver/step_order_patterns.py where it leaves them open).

    python benchmarks/step_order_patterns.py --only "405B / 2048" --pp 64 --below 19.121 [--limit S]

Per choice (DualPipe at that pipeline depth, fitting the quick memory bound): micro-batches, recompute, whether it
closed, its bound, its best plan's step order and stage layers, and CPU seconds."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import solver_speed as ss
    from parplan.costmodel.evaluation.prediction_band import with_memory_band
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.completion import pinned_spec
    from parplan.solver.deadline import TimeUp
    from parplan.solver.problem import Problem
    from parplan.solver.step_order_branch import solve_dualpipe_choice, takes
    from parplan.solver.step_order_cuts import objective_s

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", required=True)
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--below", type=float, required=True)
    ap.add_argument("--limit", type=float, default=300.0, help="seconds per choice")
    args = ap.parse_args()
    name, raw = next((n, r) for n, r in ss.SCENARIOS if args.only in n)
    P = Problem.build(pinned_spec(with_memory_band(validate_spec(raw))))
    forms: dict = {}
    for i, c in enumerate(P.choices):
        if c.schedule.value != "dualpipe" or c.pp != args.pp or not takes(P, i) or P.quick_mem_kib[i] > P.cap_kib:
            continue
        c0 = time.process_time()
        try:
            out = solve_dualpipe_choice(P, i, P.cap_kib, args.below, time.perf_counter() + args.limit,
                                        forms.setdefault(c.num_microbatches, []))
        except TimeUp:
            print(f"{name} choice {i}: TP{c.tp} PP{c.pp} m={c.num_microbatches} recompute {c.recompute}: past "
                  f"{args.limit:.0f} s", flush=True)
            continue
        if out is None:
            continue
        best = "none below" if out.best is None else f"{objective_s(out.best):.4f} s {out.best.plan.stage_layers}"
        print(f"{name} choice {i}: TP{c.tp} PP{c.pp} m={c.num_microbatches} recompute {c.recompute}: "
              f"{'exact' if out.exact else 'open'}, bound {out.bound_s:.4f} s, best {best}; "
              f"CPU {time.process_time() - c0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
