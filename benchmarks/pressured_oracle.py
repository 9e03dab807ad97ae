"""One exhaustive ``optimize`` call on a pressured spec of many layers (issue 37 item 5): status, call time, peak RSS
(the kernel's VmHWM) and the plan, through the oracle's own summed-time walk or, with ``--via-cpsat``, with the
table handed to the CP-SAT model as main did before (a per_stage table too large to pool whose Σ_u time_u varies).

    python benchmarks/pressured_oracle.py --layers 1000000 --pp 8 --time-limit 20
    python benchmarks/pressured_oracle.py --layers 1000000 --pp 8 --time-limit 20 --via-cpsat

The spec: 1F1B, TP 1, full recompute, a small dense model, the GPU memory set half way between the even split's
peak with every layer recomputed and without recompute (tests/costmodel/schedules/test_uneven_bubble.py
``pressured``). Run each in a fresh process: the peak is the process's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _via_cpsat() -> None:
    """Route the tables main sent to CP-SAT there again (solver/oracle/fallback.py)."""
    from parplan.solver.oracle import grouped, per_stage, solve
    from parplan.solver.oracle.bisection import sum_varies
    from parplan.solver.oracle.fallback import per_stage_by_cpsat
    own = per_stage.per_stage

    def routed(table_solve, units):
        t = table_solve.t
        spare = t.num_layers - int(units.layers_min.sum())
        too_large = spare >= 0 and t.num_units * (spare // t.grid + 1) > per_stage.POOLED_LIMIT
        if too_large and not spare % t.grid and sum_varies(t, units):
            return per_stage_by_cpsat(table_solve, units)
        return own(table_solve, units)
    solve.per_stage = grouped.per_stage = routed


def peak_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=1_000_000)
    ap.add_argument("--pp", type=int, default=8)
    ap.add_argument("--share", type=float, default=0.5, help="where the memory lies between full and no recompute")
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--budget-mib", type=int, default=2048)
    ap.add_argument("--via-cpsat", action="store_true")
    args = ap.parse_args()
    from parplan import optimize
    from parplan.solver.cpsat import SolverControls
    from tests.costmodel.schedules.test_uneven_bubble import SMALL, pressured
    if args.via_cpsat:
        _via_cpsat()
    pp = args.pp
    data = dict(model={**SMALL, "num_layers": args.layers}, training=dict(seq_len=2048, global_batch_size=pp * 4),
                cluster=dict(gpu="H100-SXM-80GB", num_gpus=pp),
                search=dict(tp=[1], cp=[1], pp=[pp], micro_batch_size=[1], schedules=["1f1b"], stage_split="per_stage",
                            recompute=["full"], zero_stages=[1]))
    spec = pressured(data, dict(pp=pp, vpp=1, schedule="1f1b", micro_batch_size=1, zero_stage=1), args.share)
    t0 = time.perf_counter()
    r = optimize(spec, method="exhaustive", controls=SolverControls(time_limit_s=args.time_limit, workers=1,
                                                                    memory_budget_mib=args.budget_mib))
    plan = r.plans[0].plan if r.plans else None
    print(json.dumps(dict(via_cpsat=args.via_cpsat, status=r.status, call_s=round(time.perf_counter() - t0, 2),
                          peak_mib=round(peak_mib()), value=r.stats.objective_value,
                          stage_layers=list(plan.stage_layers) if plan else None,
                          recompute_layers=list(plan.recompute_layers or []) if plan else None)))


if __name__ == "__main__":
    main()
