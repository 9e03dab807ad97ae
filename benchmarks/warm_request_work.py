"""What a warm request still computes (issue 41 item 3): work counts, which read the same on a busy machine, and CPU
time beside them.

    python benchmarks/warm_request_work.py [--requests N] [--quick]

For S3 and S1 (benchmarks/warm_service.py's scenarios), in-process and deterministic, the warm cache holding what the
earlier requests built (one warm-up request, then N requests with another global batch each):

* per request, the calls of the pieces a warm request may have to build: ``choice_costs`` (a base choice's costs:
  solver/warm_cache.py), ``mean_bound_parts``, ``build_table`` and ``relaxation_parts`` (the bounds' parts:
  solver/shared_bounds.py), its CPU milliseconds, and how many of the request's base choices hold a micro-batch size
  no earlier request had (their costs, bounds and tables are new: every piece reads the micro-batch size);
* the median CPU milliseconds of the requests, then of the same requests again (every batch seen before: what a
  warm service that has seen those batches pays);
* the integer scale of each request (solver/tables.py ``Scale.for_problem``): the tables and relaxation parts are in
  its units, so a request at another scale rebuilds the relaxations of every choice it bounds;
* for the new-GPU-count repeat (G, then G'), how many base choices at G' equal one at G but for dp (what a cost
  split into a dp-free part and a dp part could reuse, links aside) and how many equal one outright; then the repeat's
  counted calls, layer sums and memo pieces built and CPU ms beside the request at G' alone (cold).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from warm_service import SCENARIOS, with_  # noqa: E402

COUNTED = ("choice_costs", "mean_bound_parts", "build_table", "relaxation_parts")


@contextlib.contextmanager
def counting(counts: collections.Counter):
    """Within the block, every call of the counted pieces from solver/problem.py adds to ``counts`` (its imports
    wrapped, restored at the end)."""
    from parplan.solver import problem

    originals = {name: getattr(problem, name) for name in COUNTED}

    def wrap(name, f):
        def counted(*args, **kwargs):
            counts[name] += 1
            return f(*args, **kwargs)
        return counted
    try:
        for name, f in originals.items():
            setattr(problem, name, wrap(name, f))
        yield
    finally:
        for name, f in originals.items():
            setattr(problem, name, f)


def request_work(raw: dict, step: int, n: int, counts: collections.Counter) -> tuple[list[dict], list[float]]:
    """One row per warm request: the counted calls, its CPU seconds, the base choices with a micro-batch size first
    seen, the scale; then the CPU seconds of the same requests again, in order (every batch seen before)."""
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize
    from parplan.solver.warm_cache import WARM

    base = raw["training"]["global_batch_size"]
    specs = [validate_spec(with_(raw, base + step * k)) for k in range(n + 1)]
    WARM.clear()
    seen_mbs: set = set()
    rows = []
    for k, spec in enumerate(specs):
        counts.clear()
        t0 = time.process_time()
        result = optimize(spec, controls=SolverControls(deterministic=True))
        cpu_s = time.process_time() - t0
        calls = {name: counts[name] for name in COUNTED}
        problem_scale, bases = _scale_and_bases(spec)
        new_mbs = {b.micro_batch_size for b in bases} - seen_mbs
        seen_mbs |= {b.micro_batch_size for b in bases}
        if k:  # the first is the warm-up
            rows.append({"gbs": spec.training.global_batch_size, **calls, "cpu_ms": 1e3 * cpu_s,
                         "bases": len(bases), "bases_new_mbs": sum(b.micro_batch_size in new_mbs for b in bases),
                         "scale": (problem_scale.time_unit_ns, problem_scale.weight), "status": result.status})
    again = []
    for spec in specs[1:]:
        t0 = time.process_time()
        optimize(spec, controls=SolverControls(deterministic=True))
        again.append(time.process_time() - t0)
    return rows, again


def _scale_and_bases(spec):
    """The request's integer scale and its base choices (a problem built as optimize builds it)."""
    from parplan.costmodel.evaluation.prediction_band import with_memory_band
    from parplan.solver.completion import pinned_spec
    from parplan.solver.problem import Problem
    from parplan.solver.warm_cache import WARM, base_choice

    s = pinned_spec(with_memory_band(spec))
    WARM.enabled = False  # built alone: the warm entry is the requests' own
    try:
        p = Problem.build(s)
    finally:
        WARM.enabled = True
    return p.scale, {base_choice(c, s) for c in p.choices}


def gpu_count_reach(raw: dict, step: int, new_gpus: int) -> tuple[int, int, int]:
    """(base choices at G', equal to one at G, equal to one at G but for dp) for the repeat at a new GPU count."""
    from parplan.frameworks.loader import validate_spec

    gbs = raw["training"]["global_batch_size"] + step
    _, at_g = _scale_and_bases(validate_spec(with_(raw, gbs)))
    _, at_g2 = _scale_and_bases(validate_spec(with_(raw, gbs, new_gpus)))
    no_dp = lambda c: c.but(dp=0, num_microbatches=0)  # noqa: E731  (dp fixes m where the costs read it)
    seen = {no_dp(c) for c in at_g}
    return len(at_g2), len(at_g2 & at_g), sum(no_dp(c) in seen for c in at_g2)


def gpu_count_repeat(raw: dict, step: int, new_gpus: int, counts: collections.Counter) -> dict:
    """The repeat at a new GPU count (the spec at G, then at G', the warm cache cleared first) against the request at G'
    alone (cold): the counted calls, the layer sums and memo pieces (costmodel/memo.py) each built, and CPU ms."""
    from parplan.frameworks.loader import validate_spec
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize
    from parplan.solver.warm_cache import WARM

    gbs = raw["training"]["global_batch_size"] + step
    at_g, at_g2 = validate_spec(with_(raw, gbs)), validate_spec(with_(raw, gbs, new_gpus))
    out = {}
    for name, first in (("repeat", at_g), ("cold", None)):
        WARM.clear()
        if first is not None:
            optimize(first, controls=SolverControls(deterministic=True))
        sizes = [(len(e.layer_sums), len(e.memo)) for e in WARM._entries.values()] or [(0, 0)]
        counts.clear()
        t0 = time.process_time()
        optimize(at_g2, controls=SolverControls(deterministic=True))
        cpu_ms = 1e3 * (time.process_time() - t0)
        (entry,) = WARM._entries.values()
        out[name] = {**{c: counts[c] for c in COUNTED}, "layer_sums": len(entry.layer_sums) - sizes[0][0],
                     "memo": len(entry.memo) - sizes[0][1], "cpu_ms": cpu_ms}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=6, help="warm requests per scenario after the warm-up")
    ap.add_argument("--quick", action="store_true", help="S3 alone (the smoke test)")
    args = ap.parse_args(argv)
    counts: collections.Counter = collections.Counter()
    print(f"# python benchmarks/warm_request_work.py --requests {args.requests}{' --quick' if args.quick else ''}: "
          "calls per warm request (deterministic, in-process, one warm-up request first; "
          f"load {os.getloadavg()[0]:.2f})")
    for name, raw, step, new_gpus in (SCENARIOS[:1] if args.quick else SCENARIOS):
        print(f"\n{name}")
        print(f"{'gbs':>5} " + " ".join(f"{c:>17}" for c in COUNTED)
              + f" {'CPU ms':>7} {'bases':>6} {'new mbs':>8} {'scale':>10}")
        with counting(counts):
            rows, again = request_work(raw, step, args.requests, counts)
        for r in rows:
            print(f"{r['gbs']:>5} " + " ".join(f"{r[c]:>17}" for c in COUNTED)
                  + f" {r['cpu_ms']:>7.1f} {r['bases']:>6} {r['bases_new_mbs']:>8} {str(r['scale']):>10}")
        print(f"median CPU ms: {statistics.median(r['cpu_ms'] for r in rows):.1f} (batches first seen), "
              f"{1e3 * statistics.median(again):.1f} (the same batches again)")
        total, same, but_dp = gpu_count_reach(raw, step, new_gpus)
        print(f"new GPU count {new_gpus}: {total} base choices, {same} equal to one at the first count, "
              f"{but_dp} equal but for dp")
        with counting(counts):
            rep = gpu_count_repeat(raw, step, new_gpus, counts)
        for name, r in rep.items():
            print(f"  {name + ' at ' + str(new_gpus):>12}: " + ", ".join(f"{c} {r[c]}" for c in COUNTED)
                  + f", layer sums built {r['layer_sums']}, memo pieces built {r['memo']}, CPU {r['cpu_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
