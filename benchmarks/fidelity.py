#!/usr/bin/env python3
"""Fidelity of the cost model on the published runs: in-sample and leave-one-source-out errors, and a plot.

    python benchmarks/fidelity.py [--data PATH] [--no-loso] [--starts N] [--jobs N]

For every row of ``published-runs.yaml`` the model can express (see :mod:`benchmarks.runs`) it prints the
published and predicted throughput, both as MFU (the row's model FLOPs as its source counts them, over the
step time, the GPUs and the dense peak of the row's precision: FP8 rows against the FP8 peak) and in the
row's own metric, and the error in MFU points:

* **in-sample**: the ``default`` preset, whose fitted knobs (``costmodel/spec/calibration.py``) were fitted on all
  rows by ``benchmarks/fit.py``;
* **leave-one-source-out (LOSO)**: for each source (publication), the same fit on the other sources' rows,
  then a prediction of the held-out source's rows. This is the honest figure for a new setting.

Peak memory is compared where published (torchtitan rows). Writes ``benchmarks/results/fidelity.txt``,
``fidelity.json`` and ``fidelity.png`` (predicted vs published MFU, one point per row, coloured by source).
The LOSO part refits the model once per source (a few minutes; needs scipy, ``pip install -e .[fit]``);
``--no-loso`` skips it and keeps the LOSO columns of the previous ``fidelity.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.fit import (  # noqa: E402
    RESULTS,
    STARTS,
    Case,
    _git_commit,
    assumptions_with,
    error_stats,
    fit,
    predict,
    fit_rows,
    prepare_cases,
)
from benchmarks.runs import METRIC_LABEL, default_data_path, load_runs  # noqa: E402
from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions  # noqa: E402

JSON_OUT = RESULTS / "fidelity.json"
TXT_OUT = RESULTS / "fidelity.txt"
PNG_OUT = RESULTS / "fidelity.png"


def _metric_value(case: Case, step_time_s: float) -> float:
    """The row's own metric for a step time: every published metric (MFU, HFU, TFLOP/s, tokens/s) is inversely
    proportional to the step time under the row's FLOP accounting."""
    return case.published * case.published_step_time_s / step_time_s


def evaluate_cases(cases: Sequence[Case], a: Optional[Assumptions] = None) -> list[dict[str, Any]]:
    """In-sample records: one dict per case under ``a`` (default: the default preset)."""
    a = a or resolve_assumptions(None)
    out = []
    for c in cases:
        p = predict(c, a)
        out.append({
            "id": c.id, "source": c.source, "metric": c.metric, "precision": c.precision, "gpu": c.gpu.name,
            "published": c.published, "predicted": _metric_value(c, p.step_time_s),
            "published_mfu": c.published_mfu, "predicted_mfu": p.mfu, "error_points": p.mfu - c.published_mfu,
            "ratio": c.published_step_time_s / p.step_time_s,
            "published_memory_gib": c.published_memory_gib, "predicted_memory_gib": p.peak_memory_gib,
            "fits": p.fits, "software_baseline_of": c.baseline_of,  # scored, not fitted (fit.SOFTWARE_BASELINE)
        })
    return out


def _loso_one(args: tuple[list[Case], str, int]) -> tuple[str, dict[str, float], dict[str, float]]:
    cases, source, starts = args
    train = [c for c in cases if c.source != source]
    held = [c for c in cases if c.source == source]
    res = fit(train, starts=starts)
    a = assumptions_with(res.values)
    return source, res.values, {c.id: predict(c, a).mfu - c.published_mfu for c in held}


def leave_one_source_out(cases: Sequence[Case], starts: int = STARTS, jobs: int = 1) -> dict[str, Any]:
    """Per-row LOSO errors (points) and the values fitted without each source."""
    sources = sorted({c.source for c in cases})
    tasks = [(list(cases), s, starts) for s in sources]
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            results = list(ex.map(_loso_one, tasks))
    else:
        results = [_loso_one(t) for t in tasks]
    errors, values = {}, {}
    for source, vals, errs in results:
        errors.update(errs)
        values[source] = vals
    return {"errors": errors, "values": values}


BOOTSTRAP_RESAMPLES = 4000
INTERVAL_LEVEL = 0.90


def bootstrap_interval(errors: Sequence[float], q: float, by_group: Optional[Sequence[str]] = None,
                       resamples: int = BOOTSTRAP_RESAMPLES, level: float = INTERVAL_LEVEL,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the ``q``-th percentile of |error|: rows resampled with replacement, or,
    with ``by_group``, whole sources (a cluster bootstrap: a source's rows share its unpublished settings, so
    their errors are correlated and resampling rows alone would understate the spread). Fixed seed."""
    e = np.abs(np.asarray(errors, float))
    rng = np.random.default_rng(seed)
    if by_group is None:
        stats = np.percentile(e[rng.integers(0, len(e), size=(resamples, len(e)))], q, axis=1)
    else:
        groups = sorted(set(by_group))
        members = [np.flatnonzero(np.asarray(by_group) == g) for g in groups]
        stats = np.empty(resamples)
        for i in range(resamples):
            picked = rng.integers(0, len(groups), size=len(groups))
            stats[i] = np.percentile(e[np.concatenate([members[j] for j in picked])], q)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _with_intervals(stats: dict[str, Any], errors: Sequence[float], sources: Sequence[str]) -> dict[str, Any]:
    for q, key in ((50, "median"), (90, "p90")):
        stats[f"{key}_interval_rows"] = bootstrap_interval(errors, q)
        stats[f"{key}_interval_sources"] = bootstrap_interval(errors, q, by_group=sources)
    return stats


def summarize(records: list[dict[str, Any]], loso: Optional[dict[str, float]]) -> dict[str, Any]:
    ins = _with_intervals(error_stats([r["error_points"] for r in records]), [r["error_points"] for r in records],
                          [r["source"] for r in records])
    out: dict[str, Any] = {"rows": len(records), "in_sample": ins}
    by_source: dict[str, dict[str, Any]] = {}
    for s in sorted({r["source"] for r in records}):
        rs = [r for r in records if r["source"] == s]
        d = {"rows": len(rs), "in_sample": error_stats([r["error_points"] for r in rs]),
             "in_sample_signed_mean": float(np.mean([r["error_points"] for r in rs]))}
        if loso:
            le = [loso[r["id"]] for r in rs if r["id"] in loso]
            d["loso"] = error_stats(le)
            d["loso_signed_mean"] = float(np.mean(le)) if le else float("nan")
        by_source[s] = d
    out["by_source"] = by_source
    if loso:
        held = [r for r in records if r["id"] in loso]
        errs = [loso[r["id"]] for r in held]
        out["loso"] = _with_intervals(error_stats(errs), errs, [r["source"] for r in held])
    mem = [r for r in records if r["published_memory_gib"] is not None]
    if mem:
        rel = [r["predicted_memory_gib"] / r["published_memory_gib"] - 1 for r in mem]
        out["memory"] = {"rows": len(mem), "median_abs_error_pct": 100 * float(np.median(np.abs(rel))),
                         "max_abs_error_pct": 100 * float(np.max(np.abs(rel))),
                         "within_10pct": int(sum(abs(x) <= 0.10 for x in rel))}
    return out


def render(records: list[dict[str, Any]], summary: dict[str, Any], loso: Optional[dict[str, float]],
           header: list[str]) -> str:
    lines = list(header)
    w = lines.append
    cols = ["id", "source", "metric", "published", "predicted", "MFU pub", "MFU pred", "err pt", "LOSO pt", "mem pred/pub GiB"]
    rows = []
    for r in records:
        lo = loso.get(r["id"]) if loso else None
        mem = f"{r['predicted_memory_gib']:.1f}"
        if r["published_memory_gib"] is not None:
            mem += f"/{r['published_memory_gib']:.1f} ({100 * (r['predicted_memory_gib'] / r['published_memory_gib'] - 1):+.0f}%)"
        fmt = (lambda v: f"{v:,.0f}") if r["metric"] == "tokens" else (lambda v: f"{v:.1f}")
        rows.append([r["id"], r["source"], METRIC_LABEL[r["metric"]] + (" fp8" if r["precision"] == "fp8" else ""),
                     fmt(r["published"]), fmt(r["predicted"]), f"{r['published_mfu']:.1f}", f"{r['predicted_mfu']:.1f}",
                     f"{r['error_points']:+.1f}", "-" if lo is None else f"{lo:+.1f}", mem])
    widths = [max(len(cols[i]), *(len(x[i]) for x in rows)) for i in range(len(cols))]
    right = {3, 4, 5, 6, 7, 8}
    fmt_line = lambda cells: "  ".join(c.rjust(wd) if i in right else c.ljust(wd) for i, (c, wd) in enumerate(zip(cells, widths))).rstrip()  # noqa: E731
    w(fmt_line(cols))
    w(fmt_line(["-" * x for x in widths]))
    for x in rows:
        w(fmt_line(x))
    w("")
    w("MFU = the row's model FLOPs (as its source counts them: full s x s attention) / (step time x GPUs x dense peak")
    w("of the row's precision; FP8 rows against the FP8 peak, torchtitan's 500 W parts against the SXM peak). The")
    w("published step time comes from the row's own metric (MFU, HFU counting the recompute forward, TFLOP/s, or")
    w("tokens/s). err pt = predicted - published MFU (in-sample: default preset); LOSO pt = the same with the knobs")
    w("fitted without the row's source.")
    for r in records:
        if r.get("software_baseline_of"):
            w(f"Scored, not fitted (a software baseline of {r['software_baseline_of']}'s plan): {r['id']}")
    w("")
    ins = summary["in_sample"]
    w("Summary (|MFU error| in points)")
    w(f"  rows:                     {summary['rows']}")
    w(f"  in-sample:                median {ins['median']:.2f}, p90 {ins['p90']:.2f}, mean {ins['mean']:.2f}, max {ins['max']:.2f}")
    if "loso" in summary:
        lo = summary["loso"]
        w(f"  leave-one-source-out:     median {lo['median']:.2f}, p90 {lo['p90']:.2f}, mean {lo['mean']:.2f}, max {lo['max']:.2f}")
    pct = int(round(100 * INTERVAL_LEVEL))
    w(f"  {pct} % bootstrap intervals ({BOOTSTRAP_RESAMPLES} resamples, seed 0), rows resampled / whole sources resampled:")
    for name, st in (("in-sample", ins), ("leave-one-source-out", summary.get("loso"))):
        if st is None or "p90_interval_rows" not in st:
            continue
        iv = lambda k: f"{st[k][0]:.2f}-{st[k][1]:.2f}"  # noqa: E731
        w(f"    {name + ':':24s} median {iv('median_interval_rows')} / {iv('median_interval_sources')}, "
          f"p90 {iv('p90_interval_rows')} / {iv('p90_interval_sources')}")
    w("")
    w(f"  {'source':26s} {'rows':>4s}  {'in-sample med/p90 (signed mean)':>32s}  {'LOSO med/p90 (signed mean)':>28s}")
    for s, d in summary["by_source"].items():
        i = d["in_sample"]
        txt = f"  {s:26s} {d['rows']:4d}  {i['median']:6.2f} / {i['p90']:5.2f} ({d['in_sample_signed_mean']:+5.1f})".ljust(70)
        if "loso" in d:
            l_ = d["loso"]
            txt += f"  {l_['median']:6.2f} / {l_['p90']:5.2f} ({d['loso_signed_mean']:+5.1f})"
        w(txt.rstrip())
    if "memory" in summary:
        m = summary["memory"]
        w("")
        w(f"  peak memory (where published, {m['rows']} rows): median |error| {m['median_abs_error_pct']:.0f} %, max "
          f"{m['max_abs_error_pct']:.0f} %, {m['within_10pct']} within 10 %")
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], loso: Optional[dict[str, float]], path: Path = PNG_OUT) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sources = sorted({r["source"] for r in records})
    cmap = plt.get_cmap("tab10")
    colour = {s: cmap(i % 10) for i, s in enumerate(sources)}
    panels = [("in-sample (default preset)", None)] + ([("leave-one-source-out", loso)] if loso else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(7.2 * len(panels), 7.0), squeeze=False)
    hi = 1.1 * max(max(r["published_mfu"], r["predicted_mfu"]) for r in records)
    if loso:
        hi = max(hi, 1.1 * max(r["published_mfu"] + loso[r["id"]] for r in records if r["id"] in loso))
    hi = min(100.0, max(hi, 10.0))
    for ax, (title, errs) in zip(axes[0], panels):
        xs = np.linspace(0.5, hi, 100)
        ax.fill_between(xs, xs / 2, np.minimum(xs * 2, hi), color="0.92", label="within 2x")
        ax.plot(xs, xs, color="0.3", lw=1, label="y = x")
        for s in sources:
            rs = [r for r in records if r["source"] == s]
            x = [r["published_mfu"] for r in rs]
            y = [r["predicted_mfu"] if errs is None else r["published_mfu"] + errs[r["id"]] for r in rs]
            ax.scatter(x, y, s=28, color=colour[s], edgecolor="black", linewidth=0.4, label=f"{s} ({len(rs)})", zorder=3)
        e = [r["error_points"] if errs is None else errs[r["id"]] for r in records]
        med, p90 = np.median(np.abs(e)), np.percentile(np.abs(e), 90)
        ax.set_title(f"{title}: |error| median {med:.1f}, p90 {p90:.1f} points", fontsize=11)
        ax.set_xlim(0, hi)
        ax.set_ylim(0, hi)
        ax.set_aspect("equal")
        ax.set_xlabel("published MFU (%)")
        ax.set_ylabel("predicted MFU (%)")
        ax.grid(True, color="0.85", lw=0.5)
    axes[0][0].legend(loc="upper left", fontsize=8, framealpha=0.9)
    fig.suptitle("parplan cost model vs published training runs (one point per row; MFU of the row's precision peak)",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--no-loso", action="store_true", help="skip the refits; reuse the LOSO errors of fidelity.json")
    ap.add_argument("--starts", type=int, default=STARTS, help="fit starting points per LOSO fit")
    ap.add_argument("--jobs", type=int, default=2, help="parallel LOSO fits")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--plot-only", action="store_true", help="redraw fidelity.png from fidelity.json and exit")
    args = ap.parse_args(argv)
    if args.plot_only:
        rec = json.loads(JSON_OUT.read_text())
        plot(rec["rows"], rec.get("loso_errors"))
        print(f"wrote {PNG_OUT.relative_to(ROOT)} from {JSON_OUT.relative_to(ROOT)}")
        return 0

    cases, skipped = prepare_cases(fit_rows(args.data))
    records = evaluate_cases(cases)
    loso_values = None
    if args.no_loso:
        loso = json.loads(JSON_OUT.read_text()).get("loso_errors") if JSON_OUT.exists() else None
    else:
        lo = leave_one_source_out(cases, starts=args.starts, jobs=args.jobs)
        loso, loso_values = lo["errors"], lo["values"]
    summary = summarize(records, loso)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    cmd = "python benchmarks/fidelity.py" + (" --no-loso" if args.no_loso else "") + (
        f" --starts {args.starts}" if args.starts != STARTS and not args.no_loso else "")
    header = [f"# Command: {cmd}", f"# Date: {date} (commit {_git_commit()} + working tree)", "",
              f"Cost model vs published runs: {len(cases)} rows expressed, {len(skipped)} not "
              f"({', '.join(i for i, _ in skipped)}; reasons in benchmarks/results/published_runs.txt)", ""]
    text = render(records, summary, loso, header)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    TXT_OUT.write_text(text)
    payload = {"command": cmd, "date": date, "summary": summary, "rows": records, "loso_errors": loso,
               "skipped": [{"id": i, "reason": r} for i, r in skipped]}
    if loso_values is not None:
        payload["loso_fitted_values"] = loso_values
    elif JSON_OUT.exists():
        prev = json.loads(JSON_OUT.read_text())
        if "loso_fitted_values" in prev:
            payload["loso_fitted_values"] = prev["loso_fitted_values"]
    JSON_OUT.write_text(json.dumps(payload, indent=1))
    if not args.no_plot:
        plot(records, loso)
    print(f"wrote {TXT_OUT.relative_to(ROOT)}, {JSON_OUT.relative_to(ROOT)}" + ("" if args.no_plot else f", {PNG_OUT.relative_to(ROOT)}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
