#!/usr/bin/env python3
"""Fit the cost model's efficiency and overlap knobs on the published runs, and write them as defaults.

    python benchmarks/fit.py [--data PATH] [--dry-run]

Reads ``benchmarks/data/published-runs.yaml`` (a copy of ``shared/data/published-runs.yaml``), maps every
row the model can express to (Spec, Plan) with :mod:`benchmarks.runs`, and fits the knobs in
:data:`PARAMS` (each within physical bounds: efficiencies and overlaps in [0, 1]) by robust least squares
(scipy ``least_squares``, Cauchy loss with a 4-point scale, 4 starting points) on the MFU error in points of
every row:

    residual = predicted MFU - published MFU,   MFU = F / (step time · GPUs · peak of the row's precision)

with F the row's model FLOPs as its source counts them (:func:`benchmarks.runs.source_flops_per_step`)
and the published step time derived from whatever the row publishes (MFU, HFU, TFLOP/s or tokens/s).
Every parameter is shared by all rows (per GPU generation where the name says so); there is no per-row
or per-source constant. The result is written to ``costmodel/spec/calibration.py``, which the ``default``
preset reads, and a report to ``benchmarks/results/fit.txt``. Needs scipy (``pip install -e .[fit]``);
the runtime package does not.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.runs import (  # noqa: E402
    default_data_path,
    express,
    load_runs,
    nominal_peak_tflops,
    predicted_reserved_gib,
    published_peak_kind,
    primary_metric,
    published_step_time_s,
    source_flops_per_step,
)
from parplan.costmodel.compute.architecture import Architecture  # noqa: E402
from parplan.costmodel.spec.assumptions import Assumptions, resolve_assumptions  # noqa: E402
from parplan.library.knob_fit import (  # noqa: E402,F401  (re-exported: benchmarks and tests read them from here)
    HUBER_SCALE_POINTS, LOSS, PARAMS, PRIOR_POINTS, PRIORS, RATIO_PARAMS, RATIOS, STARTS, UNCAPPED, Param,
    assumptions_with, derived_values, fit_knobs)
from parplan.costmodel.evaluation.choice import choice_costs  # noqa: E402
from parplan.costmodel.evaluation.evaluate import PlanError, evaluate_costs, plan_choice, resolve_plan  # noqa: E402
from parplan.costmodel.spec.hardware import GPU, resolve_gpu  # noqa: E402
from parplan.costmodel.spec.spec import Plan, Spec  # noqa: E402

CALIBRATION_PY = ROOT / "costmodel" / "spec" / "calibration.py"
RESULTS = ROOT / "benchmarks" / "results"


# The knobs fitted, their priors and the fit's machinery: parplan.library.knob_fit (shared with `solver-cli
# calibrate`, issue 38 item 2).


# --------------------------------------------------------------------------------------------- cases
SOURCES = (  # (id prefix, label): one group per publication, for leave-one-source-out
    ("narayanan2021", "Narayanan 2021"),
    ("megatron-readme2021", "Megatron README 2021"),
    ("korthikanti2022", "Korthikanti 2022"),
    ("mcore-readme2024", "Megatron-Core 2024"),
    ("mcore-dsv3-gb200", "Megatron-Core DSv3 GB200"),
    ("deepseek-v3", "DeepSeek-V3"),
    ("nemo2407", "NeMo 24.07"),
    ("nemo-longseq", "NeMo long-seq"),
    ("torchtitan", "torchtitan 2024-12"),
    ("llmfoundry", "LLM Foundry"),
    ("mlperf51", "MLPerf Training v5.1"),
)

# measured rows read beside published-runs.yaml (benchmarks/mlperf.py); rows with ``not_expressible`` are left out
EXTRA_DATA = (ROOT / "benchmarks" / "data" / "mlperf-v5.1.yaml",)


def fit_rows(data: Optional[Path] = None, extra: Sequence[Path] = EXTRA_DATA) -> list[dict]:
    """The rows the fit and the fidelity report use: published-runs.yaml and the extra measured files."""
    rows = list(load_runs(data or default_data_path()))
    for path in extra:
        if Path(path).exists():
            rows += [r for r in load_runs(path) if not r.get("not_expressible")]
    return rows


def source_of(row_id: str) -> str:
    for prefix, label in SOURCES:
        if row_id.startswith(prefix):
            return label
    return "other"


@dataclass
class Case:
    """One expressible row, prepared for fast repeated evaluation."""

    id: str
    source: str
    row: dict
    spec: Spec
    plan: Plan
    gpu: GPU
    arch: Architecture
    overrides: dict[str, Any]
    metric: str
    published: float
    published_step_time_s: float
    mfu_scale: float  # MFU in % = mfu_scale / step time (source model FLOPs, peak of the row's precision)
    precision: str
    generation: str
    published_memory_gib: Optional[float]
    assumed: dict[str, str] = field(default_factory=dict)
    baseline_of: Optional[str] = None  # scored, not fitted: the software baseline of this row's plan (SOFTWARE_BASELINE)

    @property
    def published_mfu(self) -> float:
        return self.mfu_scale / self.published_step_time_s


def prepare_cases(rows: Sequence[dict]) -> tuple[list[Case], list[tuple[str, str]]]:
    """Cases for every row with a throughput the model can express; (id, reason) for the others."""
    cases, skipped = [], []
    for row in rows:
        ex = express(row)
        if not ex.ok:
            skipped.append((ex.row_id, ex.reason))
            continue
        metric = primary_metric(row)
        if metric is None:
            skipped.append((ex.row_id, "no throughput published"))
            continue
        try:
            plan = resolve_plan(ex.spec, ex.plan)
        except PlanError as e:
            skipped.append((ex.row_id, f"plan rejected: {e}"))
            continue
        spec = ex.spec
        gpu = resolve_gpu(spec.cluster)
        peak = nominal_peak_tflops(spec) * 1e12
        f_model, _ = source_flops_per_step(spec, plan)
        t_pub = published_step_time_s(row, spec, plan, metric)
        key = {"mfu": "mfu_pct", "hfu": "hfu_pct", "tflops": "tflops_per_gpu", "tokens": "tokens_per_sec_per_gpu"}[metric]
        cases.append(Case(
            id=ex.row_id, source=source_of(ex.row_id), row=row, spec=spec, plan=plan, gpu=gpu,
            arch=Architecture(spec.model), overrides=dict(ex.overrides), metric=metric,
            published=float(row[key]), published_step_time_s=t_pub,
            mfu_scale=100.0 * f_model / (spec.cluster.num_gpus * peak), precision=spec.training.precision,
            generation=gpu.generation, published_memory_gib=row.get("peak_memory_gib"), assumed=dict(ex.assumed),
            baseline_of=row.get(SOFTWARE_BASELINE)))
    check_software_baselines(cases)
    return cases, skipped


# A row the source publishes as the starting point of an optimization history (``software_baseline_of: <id>``, the
# row of the same plan after the software work) is scored in every report, in-sample and held out, but not fitted:
# the cost model prices a plan on the software its rates describe, and gives one prediction for both rows, so fitting
# the baseline fits the two software states' mean. Checked: the named row exists and expresses the same input.
SOFTWARE_BASELINE = "software_baseline_of"


def check_software_baselines(cases: Sequence[Case]) -> None:
    """Every ``software_baseline_of`` names an expressed row of the same source and the same model input (spec,
    plan, row overrides); a ValueError names the row otherwise."""
    by_id = {c.id: c for c in cases}
    for c in cases:
        if c.baseline_of is None:
            continue
        final = by_id.get(c.baseline_of)
        if final is None or final.source != c.source:
            raise ValueError(f"{c.id}: {SOFTWARE_BASELINE} {c.baseline_of!r} is not an expressed row of its source")
        if (final.spec, final.plan, final.overrides) != (c.spec, c.plan, c.overrides) or final.baseline_of:
            raise ValueError(f"{c.id}: {SOFTWARE_BASELINE} {c.baseline_of!r} is not the same plan (one model input)")


# --------------------------------------------------------------------------------------------- predict
@dataclass
class Prediction:
    step_time_s: float
    mfu: float  # source accounting, %
    peak_memory_gib: float  # what the row's published peak measures (benchmarks/runs.py published_peak_kind)
    fits: bool


def predict(case: Case, a: Assumptions) -> Prediction:
    a = a.model_copy(update=case.overrides) if case.overrides else a
    costs = choice_costs(case.spec, plan_choice(case.plan), case.gpu, a, case.arch)
    ev = evaluate_costs(case.spec, case.plan, costs, a, [])
    m = ev.metrics
    # the peak the row publishes: the ledger's, or the caching allocator's reserved peak (torchtitan's log line)
    peak = predicted_reserved_gib(ev) if published_peak_kind(case.row) == "reserved" else m.peak_memory_gib
    return Prediction(m.step_time_s, case.mfu_scale / m.step_time_s, peak, m.fits)


def residuals(cases: Sequence[Case], a: Assumptions) -> np.ndarray:
    """Predicted minus published MFU, in points, per case."""
    return np.array([predict(c, a).mfu - c.published_mfu for c in cases])


# --------------------------------------------------------------------------------------------- fit
@dataclass
class FitResult:
    values: dict[str, float]
    cost: float
    nfev: int
    at_bound: list[str]
    train_ids: list[str]
    scored_only: list[str] = field(default_factory=list)  # software baselines among the cases given (not fitted)


def fit(cases: Sequence[Case], params: Sequence[Param] = PARAMS, starts: int = STARTS,
        max_nfev: int = 400, verbose: int = 0) -> FitResult:
    """Robust least squares of the MFU error (points) over ``cases`` (software baselines left out: they are
    scored, not fitted; :data:`SOFTWARE_BASELINE`), from ``starts`` starting points (library/knob_fit.py
    fit_knobs, with the :data:`PRIORS`)."""
    scored_only = [c.id for c in cases if c.baseline_of is not None]
    cases = [c for c in cases if c.baseline_of is None]
    base = resolve_assumptions(None)
    knobs = fit_knobs(lambda values: residuals(cases, assumptions_with(values, base)), params, PRIORS,
                      starts=starts, max_nfev=max_nfev, verbose=verbose)
    return FitResult(values=knobs.values, cost=knobs.cost, nfev=knobs.nfev, at_bound=knobs.at_bound,
                     train_ids=[c.id for c in cases], scored_only=scored_only)


# --------------------------------------------------------------------------------------------- statistics
def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, float), q)) if len(values) else float("nan")


def error_stats(errors: Sequence[float]) -> dict[str, float]:
    e = np.abs(np.asarray(errors, float))
    return {"n": int(len(e)), "median": percentile(e, 50), "p90": percentile(e, 90), "mean": float(e.mean()) if len(e) else float("nan"),
            "max": float(e.max()) if len(e) else float("nan")}


def generation_lines(cases: Sequence[Case], a: Assumptions, label: str = "in-sample") -> list[str]:
    """Median |throughput error| (%, predicted vs measured step time) per GPU generation, and of the MLPerf rows."""
    out = []
    groups: dict[str, list[float]] = {}
    for c in cases:
        err = 100.0 * abs(c.published_step_time_s / predict(c, a).step_time_s - 1.0)
        groups.setdefault(c.generation, []).append(err)
        if c.source == "MLPerf Training v5.1":
            groups.setdefault(f"MLPerf {c.generation}", []).append(err)
    for g in sorted(groups):
        out.append(f"  {label} median |throughput error| {g:18s} {percentile(groups[g], 50):5.1f} %  ({len(groups[g])} rows)")
    return out


# --------------------------------------------------------------------------------------------- output
def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except Exception:  # pragma: no cover
        return "unknown"


def write_calibration(result: FitResult, params: Sequence[Param] = PARAMS, path: Path = CALIBRATION_PY,
                      command: str = "python benchmarks/fit.py") -> None:
    fitted = {p.name: round(result.values[p.name], 4) for p in params if p.name not in RATIO_PARAMS}
    ratios = {p.name: round(result.values[p.name], 4) for p in params if p.name in RATIO_PARAMS}
    fixed = {k: round(v, 4) for k, v in derived_values({**fitted, **ratios}).items()}
    lines = [
        '"""Fitted default values of the cost model\'s efficiency and overlap knobs.',
        "",
        f"GENERATED by ``{command}`` from benchmarks/data/published-runs.yaml and mlperf-v5.1.yaml",
        f"({len(result.train_ids)} rows); do not edit by hand (rerun the fit). ``FITTED`` holds the fitted values,",
        "``RATIOS`` the fitted Blackwell/Hopper ratios (priors in benchmarks/fit.py PRIORS), ``FIXED`` the Blackwell",
        "knobs they give (Hopper value x ratio), ``BOUNDS`` the interval each fitted value was confined to.",
        "Sources and meaning of every knob: costmodel/spec/assumptions.py.",
        '"""',
        "",
        "FITTED: dict[str, float] = {",
        *[f'    "{k}": {v!r},' for k, v in fitted.items()],
        "}",
        "",
        "RATIOS: dict[str, float] = {  # Blackwell / Hopper, fitted with priors",
        *[f'    "{k}": {v!r},' for k, v in ratios.items()],
        "}",
        "",
        "FIXED: dict[str, float] = {  # Blackwell: the Hopper value x its ratio",
        *[f'    "{k}": {v!r},' for k, v in fixed.items()],
        "}",
        "",
        "BOUNDS: dict[str, tuple[float, float]] = {",
        *[f'    "{p.name}": ({p.lo!r}, {p.hi!r}),' for p in params],
        "}",
        "",
    ]
    path.write_text("\n".join(lines))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--dry-run", action="store_true", help="fit and report, but do not rewrite costmodel/spec/calibration.py")
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument("--starts", type=int, default=STARTS, help="starting points (1: the quick form, the documented start only)")
    ap.add_argument("--no-extra", action="store_true", help="published-runs.yaml only (no MLPerf rows)")
    args = ap.parse_args(argv)

    rows = fit_rows(args.data, () if args.no_extra else EXTRA_DATA)
    cases, skipped = prepare_cases(rows)
    result = fit(cases, starts=args.starts, verbose=2 if args.verbose else 0)
    a = assumptions_with(result.values)
    err = residuals(cases, a)
    st = error_stats(err)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
    cmd = "python benchmarks/fit.py" + (" --dry-run" if args.dry_run else "") + (
        f" --starts {args.starts}" if args.starts != STARTS else "") + (" --no-extra" if args.no_extra else "")
    out = [f"# Command: {cmd}", f"# Date: {date} (commit {_git_commit()} + working tree)", "",
           f"Fitted on {len(result.train_ids)} of {len(cases)} rows ({len(skipped)} not expressible); {LOSS} loss, scale {HUBER_SCALE_POINTS:g} points, {args.starts} starts;"
           f" {result.nfev} residual evaluations (finite-difference Jacobians not counted).",
           *[f"Scored, not fitted ({SOFTWARE_BASELINE}): {rid}" for rid in result.scored_only], "",
           f"{'knob':34s} {'value':>9s}  {'bounds':>16s}  meaning"]
    for p in PARAMS:
        v = result.values[p.name]
        flag = "  (at bound)" if p.name in result.at_bound else ""
        out.append(f"{p.name:34s} {v:9.4f}  [{p.lo:g}, {p.hi:g}]".ljust(64) + f"  {p.why}{flag}")
    for dst, v in derived_values(result.values).items():
        src, ratio = RATIOS[dst]
        out.append(f"{dst:34s} {v:9.4f}  {src} x {ratio}")
    out += ["", f"in-sample |MFU error|: median {st['median']:.2f} points, p90 {st['p90']:.2f}, mean {st['mean']:.2f}, "
                f"max {st['max']:.2f} ({st['n']} rows)"]
    out += generation_lines(cases, a)
    text = "\n".join(out) + "\n"
    print(text)
    if not args.dry_run:
        write_calibration(result, command=cmd)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "fit.txt").write_text(text)
        print(f"wrote {CALIBRATION_PY.relative_to(ROOT)} and {(RESULTS / 'fit.txt').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
