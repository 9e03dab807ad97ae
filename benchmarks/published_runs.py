#!/usr/bin/env python3
"""Predicted vs published throughput for every row of published-runs.yaml the cost model can express.

    python benchmarks/published_runs.py [--data PATH] [--json OUT] [--preset default] [--verbose] [--no-heldout]

Default data: ``benchmarks/data/published-runs.yaml`` (a copy of ``shared/data/published-runs.yaml``),
falling back to ``<repo>/../shared/data/published-runs.yaml``. The row -> (Spec, PlanSpec) mapping and
the comparison live in :mod:`benchmarks.runs`. Exit status is 0 whatever the errors are: this is a
report, the bounds are asserted by ``tests/benchmarks/test_published_runs.py``.

Held-out rows (``benchmarks/data/heldout-runs.yaml``: sources the fit never reads) are compared the same way
and summarized separately after the main table (``--no-heldout`` skips them; ``--data`` them for the table).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any, Optional, TextIO

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.runs import (  # noqa: E402
    KNOWN_OUT_OF_BAND,
    METRIC_LABEL,
    OUT_OF_BAND_CAUSES,
    compare_all,
    HELDOUT_DATA,
    default_data_path,
    load_runs,
    summarize,
)
from parplan.costmodel.spec.assumptions import PRESETS  # noqa: E402


def _fmt(v: Optional[float], digits: int = 1) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def render(results: list[dict[str, Any]], summary: dict[str, Any], out: TextIO, verbose: bool = False) -> None:
    """The comparison table and its legend, the values each row did not state (``verbose``), the rows the model
    cannot express or fit, and the summary."""
    w = lambda s="": print(s, file=out)  # noqa: E731
    render_table([r for r in results if r["expressed"]], out)
    w()
    w("metric: MFU % -> our mfu; HFU % (counts recomputation) -> our hfu; TFLOP/s/GPU -> our hfu x peak when the")
    w("row's FLOPs count the recompute forward (Narayanan 2021), else model TFLOP/s; tok/s/GPU -> tokens/s / GPUs.")
    w("ratio = predicted / published; error = ratio - 1 (and predicted - published in points for MFU/HFU).")
    w("plan: mbAxM = micro-batch size x micro-batches; interv = interleaved 1F1B; rc = recompute; z = ZeRO stage;")
    w("sp = sequence parallel. '!fit' = the model predicts more memory than usable (the run did fit).")

    if verbose:
        w()
        w("Values not in the row (chosen by benchmarks/runs.py):")
        for r in results:
            for k, v in r["assumed"].items():
                w(f"  {r['id']}: {k} = {v}")

    w()
    w(f"Not expressible ({len(summary['not_expressed'])}):")
    for r in summary["not_expressed"]:
        w(f"  {r['id']}: {r['reason']}")

    w()
    w(f"Plans the model says do not fit ({len(summary['do_not_fit'])} of {summary['expressed']}; each ran, so each is a "
      "memory-model miss):")
    for r in summary["do_not_fit"]:
        w(f"  {r['id']}: predicted peak {r['predicted_peak_memory_gib']:.1f} GiB > {r['usable_memory_gib']:.1f} GiB usable")
        if r.get("missing_fact"):
            for line in textwrap.wrap("missing: " + r["missing_fact"], 106):
                w(f"      {line}")
    render_completed(results, out)
    if summary["legality_violations"]:
        w()
        w("Legality rules the published plan breaks in the model:")
        for r in summary["legality_violations"]:
            w(f"  {r['id']}: {'; '.join(r['violations'])}")

    if summary["memory_published"]:
        w()
        w("Peak memory where published (GiB, predicted / published; 'reserved': the caching allocator's reserved peak, "
          "the ledger's tensors plus its fragmentation, benchmarks/runs.py predicted_reserved_gib):")
        for r in summary["memory_published"]:
            w(f"  {r['id']}: {r['predicted']:.1f} / {r['published']:.1f} ({r['predicted'] / r['published']:.2f}x; "
              f"{r['kind']}; ledger peak {r['ledger_peak']:.1f})")
        mem = summary["memory_published"]
        w(f"  median |error| {summary['memory_published_median_abs_error_pct']:.1f} %; "
          f"{summary['memory_published_within_10pct']} of {len(mem)} within 10 %")

    render_summary(summary, out)


def _runs(values: list) -> str:
    """A list with its runs of equal items written ``item×count`` (a 16 x 8 chunk layout in one line)."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        item = _runs(values[i]) if isinstance(values[i], list) else str(values[i])
        parts.append(item if j - i == 1 else f"{item}×{j - i}")
        i = j
    return "[" + ", ".join(parts) + "]"


def render_completed(results: list[dict[str, Any]], out: TextIO) -> None:
    """The rows judged at the planner's completion (benchmarks/row_completion.py): every field it chose, or why
    a row that does not fit was not completed."""
    done = [r for r in results if r.get("expressed") and r.get("completion_note") is not None]
    if not done:
        return
    w = lambda s="": print(s, file=out)  # noqa: E731
    w()
    w(f"Completed by the planner ({len(done)} rows; the fields the source does not state, searched with the stated "
      "ones pinned; without --complete-all only rows whose mapped defaults do not fit):")
    for r in done:
        fit = f"fits, {r['predicted_peak_memory_gib']:.1f}" if r["fits"] else f"does not fit, {r['predicted_peak_memory_gib']:.1f}"
        w(f"  {r['id']}: {r['completion_note']}; {fit} of {r['usable_memory_gib']:.1f} GiB usable; "
          f"unstated: {', '.join(r['unstated']) or 'none'}")
        for k, v in (r.get("completed") or {}).items():
            w(f"      {k} = {_runs(v) if isinstance(v, list) else v}")


def render_table(done: list[dict[str, Any]], out: TextIO) -> None:
    """One line per expressed row: plan, metric, published and predicted value, ratio, error, memory."""
    header = ["id", "gpus", "plan", "metric", "published", "predicted", "ratio", "error", "mem GiB pred/pub"]
    rows = []
    for r in done:
        err = f"{r['error_pct']:+.0f}%"
        if r.get("error_points") is not None:
            err += f" ({r['error_points']:+.1f} pt)"
        mem = f"{r['predicted_peak_memory_gib']:.0f}"
        if r.get("published_peak_memory_gib") is not None:
            mem += f"/{r['published_peak_memory_gib']:.0f}"
        if not r["fits"]:
            mem += " !fit"
        flag = "  <-- >2x" if not 0.5 <= r["ratio"] <= 2.0 else ""
        rows.append([r["id"], str(r["num_gpus"]), r["plan_summary"], METRIC_LABEL[r["metric"]],
                     _fmt(r["published"]), _fmt(r["predicted"]), f"{r['ratio']:.2f}", err, mem + flag])
    for line in _table(header, rows, right={1, 4, 5, 6}):
        print(line, file=out)


def render_summary(summary: dict[str, Any], out: TextIO) -> None:
    """Rows expressed, error percentiles, the worst ratios and the diagnosed causes of rows off by 2x."""
    w = lambda s="": print(s, file=out)  # noqa: E731
    w()
    w("Summary")
    w(f"  rows expressed:              {summary['expressed']} / {summary['rows']}")
    bm = summary["by_metric"]
    w(f"  primary metric:              MFU {bm['mfu']}, HFU {bm['hfu']}, TFLOP/s {bm['tflops']}, tok/s {bm['tokens']}")
    w(f"  median |error|:              {summary['median_abs_error_pct']:.1f} %  "
      f"(signed median {summary['median_signed_error_pct']:+.1f} %; {summary['over_predicted']} over, "
      f"{summary['under_predicted']} under)")
    w(f"  90th percentile |error|:     {summary['p90_abs_error_pct']:.1f} %")
    w(f"  median |MFU/HFU error|:      {summary['median_abs_error_points']:.1f} points "
      f"({summary['rows_with_utilisation_metric']} rows; p90 {summary['p90_abs_error_points']:.1f} points)")
    hi, lo = summary["highest_ratio"], summary["lowest_ratio"]
    if hi and lo:
        w(f"  worst ratio:                 {hi['ratio']:.2f} ({hi['id']}); lowest {lo['ratio']:.2f} ({lo['id']})")
    off = summary["off_by_more_than_2x"]
    w(f"  rows off by more than 2x:    {len(off)}")
    causes: dict[str, list[str]] = {}
    for rid in off:
        causes.setdefault(KNOWN_OUT_OF_BAND.get(rid, "not diagnosed"), []).append(rid)
    for cause, ids in causes.items():
        w(f"    [{cause}] {', '.join(ids)}")
        if cause in OUT_OF_BAND_CAUSES:
            for line in textwrap.wrap(OUT_OF_BAND_CAUSES[cause], 110):
                w(f"        {line}")
    w(f"  rows predicted not to fit:   {len(summary['do_not_fit'])}")


def render_heldout(summary: dict[str, Any], out: TextIO, rows: Optional[list[dict[str, Any]]] = None) -> None:
    """The held-out rows' figures, apart from the fitted rows' (their table: --data benchmarks/data/heldout-runs.yaml)."""
    w = lambda s="": print(s, file=out)  # noqa: E731
    w()
    w("Held-out rows (benchmarks/data/heldout-runs.yaml; sources the fit never read)")
    w(f"  rows expressed:              {summary['expressed']} / {summary['rows']} "
      f"({100.0 * summary['expressed'] / max(summary['rows'], 1):.1f} % coverage)")
    w(f"  median |error|:              {summary['median_abs_error_pct']:.1f} %  "
      f"(signed median {summary['median_signed_error_pct']:+.1f} %)")
    w(f"  90th percentile |error|:     {summary['p90_abs_error_pct']:.1f} %")
    w(f"  rows off by more than 2x:    {len(summary['off_by_more_than_2x'])} {summary['off_by_more_than_2x']}")
    w(f"  rows predicted not to fit:   {len(summary['do_not_fit'])}")
    for r in summary["do_not_fit"]:
        note = f"; missing: {r['missing_fact']}" if r.get("missing_fact") else ""
        w(f"  not fitting: {r['id']} ({r['predicted_peak_memory_gib']:.0f} > {r['usable_memory_gib']:.0f} GiB){note[:120]}")
    for r in summary["not_expressed"]:
        w(f"  not expressed: {r['id']}: {r['reason'][:100]}")
    render_completed(rows or [], out)


def compare_extra(rows: list[dict], preset: str = "default") -> list[dict[str, Any]]:
    """Rows of an extra data file (e.g. ``data/mlperf-v5.1.yaml``): compared like the others, except those whose
    reader marked them ``not_expressible`` (a GPU the catalog lacks, NVFP4), reported with that reason."""
    out = []
    for r in rows:
        if r.get("not_expressible"):
            out.append({"id": r["id"], "model": r.get("model"), "num_gpus": r.get("num_gpus"), "expressed": False,
                        "assumed": {}, "reason": r["not_expressible"]})
        else:
            out.extend(compare_all([r], preset))
    return out


def generation_of(result: dict[str, Any]) -> str:
    from parplan.costmodel.spec.hardware import lookup_gpu
    return lookup_gpu(result["spec"]["cluster"]["gpu"]).generation


def render_extra(path: Path, results: list[dict[str, Any]], out: TextIO) -> dict[str, Any]:
    """Per-row predicted / measured and the median |error| per GPU generation, for an extra data file."""
    from benchmarks.runs import _percentile
    w = lambda s="": print(s, file=out)  # noqa: E731
    w()
    w(f"Extra rows ({path}; benchmarks/fit.py fits on data/mlperf-v5.1.yaml as its own source)")
    done = [r for r in results if r["expressed"]]
    render_table(done, out)
    summary = summarize(results)
    by_gen: dict[str, list[float]] = {}
    for r in done:
        by_gen.setdefault(generation_of(r), []).append(r["error_pct"])
    w(f"  rows expressed:              {summary['expressed']} / {summary['rows']}")
    if done:
        w(f"  median |error|:              {summary['median_abs_error_pct']:.1f} %  "
          f"(signed median {summary['median_signed_error_pct']:+.1f} %; {summary['over_predicted']} over, "
          f"{summary['under_predicted']} under)")
        w(f"  90th percentile |error|:     {summary['p90_abs_error_pct']:.1f} %")
    for gen, errs in sorted(by_gen.items()):
        w(f"  {gen:<28} {len(errs):>2} rows: median |error| {_percentile([abs(e) for e in errs], 50):.1f} % "
          f"(signed median {_percentile(errs, 50):+.1f} %)")
    w(f"  rows predicted not to fit:   {len(summary['do_not_fit'])}")
    for r in summary["not_expressed"]:
        w(f"  not expressed: {r['id']}: {r['reason'][:110]}")
    summary["by_generation"] = {g: {"rows": len(e), "median_abs_error_pct": _percentile([abs(x) for x in e], 50),
                                    "median_signed_error_pct": _percentile(e, 50)} for g, e in by_gen.items()}
    return summary


def main(argv: Optional[list[str]] = None, out: TextIO = sys.stdout) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=None, help=f"published-runs.yaml (default: {default_data_path()})")
    p.add_argument("--json", type=Path, default=None, dest="json_out", help="write per-row results and the summary here")
    p.add_argument("--preset", default="default", choices=sorted(PRESETS), help="assumptions preset")
    p.add_argument("--verbose", "-v", action="store_true", help="also list every value chosen for a null field")
    p.add_argument("--no-heldout", action="store_true", help="skip the held-out rows' summary")
    p.add_argument("--no-complete", action="store_true",
                   help="judge every row at its mapped defaults only (no planner completion)")
    p.add_argument("--complete-all", action="store_true",
                   help="judge every row with unstated plan fields at the planner's best completion of them, not only "
                        "rows whose mapped defaults do not fit (benchmarks/row_completion.py)")
    p.add_argument("--extra", type=Path, action="append", default=[],
                   help="another data file reported apart (e.g. benchmarks/data/mlperf-v5.1.yaml); repeatable")
    args = p.parse_args(argv)

    data = args.data or default_data_path()
    rows = load_runs(data)
    policy = "all" if args.complete_all else (False if args.no_complete else True)
    results = compare_all(rows, args.preset, policy)
    summary = summarize(results)
    try:
        shown = Path(data).resolve().relative_to(ROOT)
    except ValueError:
        shown = data
    print(f"Published runs vs the parplan cost model (preset {args.preset}; data {shown})", file=out)
    print(file=out)
    render(results, summary, out, verbose=args.verbose)
    heldout = None
    if not args.no_heldout and args.data is None and HELDOUT_DATA.exists():
        held = compare_all(load_runs(HELDOUT_DATA), args.preset, policy)
        heldout = {"summary": summarize(held), "rows": held}
        render_heldout(heldout["summary"], out, held)
    extras = {}
    for path in args.extra:
        res = compare_extra(load_runs(path), args.preset)
        extras[str(path)] = {"summary": render_extra(path, res, out), "rows": res}
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump({"preset": args.preset, "data": str(data), "summary": summary, "rows": results,
                       "heldout": heldout, "extra": extras}, f, indent=1)
        print(f"\nwrote {args.json_out}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
