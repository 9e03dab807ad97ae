"""What the memory band costs the search: S3 (benchmarks/solver_speed.py's first scenario, Llama-3 8B on 8 H100)
planned in-process for distinct global batches, with ``search.memory_band`` off and on, alternating; the median CPU
seconds of a warm call (the warm cache holding the spec's pieces, as a warm service's does).

    python benchmarks/band_search_cost.py [--batches N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def median_cpu_ms(band: bool, batches: int) -> float:
    """Median CPU milliseconds of ``batches`` distinct-batch optimize calls after one warm-up call."""
    import solver_speed as ss
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize

    _, raw = ss.SCENARIOS[0]

    def spec(gbs: int):
        return validate_spec({**raw, "training": {**raw["training"], "global_batch_size": gbs},
                              "search": {**(raw.get("search") or {}), "memory_band": band}})

    optimize(spec(64), controls=SolverControls(deterministic=True))
    times = []
    for gbs in range(72, 72 + 8 * batches, 8):
        t0 = time.process_time()
        optimize(spec(gbs), controls=SolverControls(deterministic=True))
        times.append(time.process_time() - t0)
    return 1000.0 * statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    print(f"# python benchmarks/band_search_cost.py --batches {args.batches} --rounds {args.rounds}  "
          f"(load {os.getloadavg()[0]:.2f})")
    for r in range(args.rounds):
        for band in (False, True):
            print(f"round {r + 1}  memory_band {str(band).lower():5s}  median CPU {median_cpu_ms(band, args.batches):6.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
