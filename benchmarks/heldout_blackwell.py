#!/usr/bin/env python3
"""Throughput error per GPU generation with the MLPerf v5.1 rows held out of the fit and in it.

    python benchmarks/heldout_blackwell.py [--starts N]

The committed calibration (benchmarks/fit.py on every row: published-runs.yaml and the MLPerf v5.1 rows) and one fit
of the same parameters without the MLPerf source (its rows predicted from the others and the priors), and the median
|throughput error| (predicted vs measured step time, %) per generation under each. A reduced form of benchmarks/fidelity.py's
leave-one-source-out for the one source that carries most Blackwell rows; writes
benchmarks/results/heldout_blackwell.txt.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.fit import (RESULTS, assumptions_with, error_stats, fit, fit_rows, generation_lines,  # noqa: E402
                            percentile, predict, prepare_cases)
from parplan.costmodel.spec.assumptions import resolve_assumptions  # noqa: E402

MLPERF = "MLPerf Training v5.1"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=1)
    ap.add_argument("--from-fidelity", action="store_true",
                    help="take the MLPerf-held-out values from benchmarks/results/fidelity.json (its LOSO fit) instead of fitting")
    args = ap.parse_args(argv)
    cases, _ = prepare_cases(fit_rows())
    cmd = "python benchmarks/heldout_blackwell.py" + (" --from-fidelity" if args.from_fidelity else f" --starts {args.starts}")
    out = [f"# Command: {cmd}", ""]
    held = [c for c in cases if c.source == MLPERF]
    train = [c for c in cases if c.source != MLPERF]
    if args.from_fidelity:
        record = json.loads((RESULTS / "fidelity.json").read_text())
        values = record["loso_fitted_values"][MLPERF]
        out.append(f"(MLPerf-held-out values: the LOSO fit of {record['command']}, {record['date']})")
    else:
        values = fit(train, starts=args.starts).values
    for label, a, values in (("MLPerf held out", assumptions_with(values), values),
                             ("MLPerf in", resolve_assumptions(None), None)):
        if values is None:
            out.append(f"{label}: the committed calibration (costmodel/spec/calibration.py, fitted on "
                       f"{sum(c.baseline_of is None for c in cases)} of the {len(cases)} rows: software baselines are scored only)")
        else:
            out.append(f"{label}: fitted on {sum(c.baseline_of is None for c in train)} rows; " + ", ".join(
                f"{k} {values[k]:.4f}" for k in sorted(values) if "blackwell" in k or "fp8" in k or "hopper" in k))
        out += generation_lines(cases, a, label)
        mfu = error_stats([predict(c, a).mfu - c.published_mfu for c in held])
        out.append(f"  {label}: MLPerf rows |MFU error| median {mfu['median']:.2f} points, p90 {mfu['p90']:.2f}")
        out.append("")
    if args.from_fidelity:  # every row predicted by the fit without its own source (fidelity.py's LOSO)
        pub = {c.id: (c.published_mfu, c.generation, c.source) for c in cases}
        groups: dict[str, list[float]] = {}
        for rid, err in record["loso_errors"].items():
            if rid not in pub:
                continue
            mfu, gen, src = pub[rid]
            e = 100.0 * abs((mfu + err) / mfu - 1.0)  # throughput error: predicted/published MFU - 1
            groups.setdefault(gen, []).append(e)
            if src == MLPERF:
                groups.setdefault(f"MLPerf {gen}", []).append(e)
        for g in sorted(groups):
            out.append(f"  leave-one-source-out median |throughput error| {g:18s} {percentile(groups[g], 50):5.2f} %  "
                       f"({len(groups[g])} rows)")
        s = record["summary"]["loso"]
        out.append(f"  leave-one-source-out |MFU error|: median {s['median']:.2f} points, p90 {s['p90']:.2f}")
    text = "\n".join(out) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "heldout_blackwell.txt").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
