"""``solver-cli calibrate``: fit the cost model's knobs to the user's measured runs, with the defaults as priors.

Every measured row (library/measured_runs.py) gives a residual in percent, ``100·(predicted/measured - 1)``: a run's
step time (the cost model's evaluation of its spec and plan), a probe kernel's share of the peak, a collective's bus
bandwidth (library/probe_rows.py). The knobs fitted are those the rows constrain: among the candidates a row can
move (knob_fit.PARAMS for the runs' GPU generation, plus the host floor's ``host_seconds_per_kernel``, and the probe
rows' own knobs), those whose one-prior-sd move changes some row's prediction by at least
:data:`SENSITIVITY_PCT` percent. The fit is library/knob_fit.py ``fit_knobs`` (the machinery that sets the default
calibration) with every knob's prior centred on its *current default* (costmodel/spec/calibration.py), its sd from
knob_fit.PRIORS where it has one, else a quarter of its bounds: a regularised fit toward the defaults, one value per
knob shared by all rows (never a constant per row). Peak memory is compared, not fitted (the memory knobs keep
their defaults; the errors are printed). The leave-one-out error refits without each row in turn and predicts it.

How far the knobs move is the data's call (:func:`cross_validated_share`): with two rows or more, the fitted move
from the defaults is taken at the share of :data:`MOVE_SHARES` whose leave-one-out predictions are best (least
squared error), so rows whose errors do not carry over from one configuration to another (a job whose residuals
differ in sign from run to run) move the knobs less, or not at all, while an error every row shares is fitted in
full. One row cannot be left out: it moves the knobs in full. (Measured on the published jobs, calibrating on k of
a job's runs and predicting the others: ``python benchmarks/ranking.py --few-shot``.)
"""

from __future__ import annotations

import datetime as _dt
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from parplan.costmodel.errors import ParplanError
from parplan.library.knob_fit import (PARAMS, PRIOR_POINTS, PRIORS, RATIO_PARAMS, RATIOS, Param, assumptions_with,
                                      derived_values, fit_knobs)  # noqa: F401
from parplan.library.measured_runs import Measured
from parplan.library.profile import PROFILE_KIND, PROFILE_VERSION

SENSITIVITY_PCT = 1.0  # a knob is constrained when one prior sd moves some row by this much
MOVE_SHARES = (1.0, 0.75, 0.5, 0.25, 0.0)  # the shares of the fitted move leave-one-out chooses from (ties: the first)
EXTRA_PARAMS = (
    Param("host_seconds_per_kernel", 0.0, 60e-6, 10e-6, scale=1e-6, why="host time per issued kernel (host floor)"),
    Param("nvlink_busbw_scale", 0.3, 1.5, 1.0, why="achieved / NCCL-tests NVLink bus bandwidth prior"),
)
EXTRA_PRIORS = {"host_seconds_per_kernel": (10e-6, 5e-6, "costmodel/spec/assumptions.py: 5-25 us per op"),
                "nvlink_busbw_scale": (1.0, 0.15, "the NCCL-tests figures as they are")}
CEILINGS = {"matmul_efficiency": "matmul_efficiency_", "fp8_matmul_efficiency": "fp8_matmul_efficiency_",
            "attention_efficiency": "attention_efficiency_"}


class CalibrationError(ParplanError):
    """Nothing to fit, or rows on more than one GPU."""


@dataclass
class Row:
    """One measured row: ``predict(a)`` in the unit of ``measured``; ``knobs`` the candidates it can move."""

    name: str
    kind: str
    measured: float
    predict: Callable[[Any], float]
    knobs: tuple[str, ...]
    base: Any  # the Assumptions the row is evaluated on, before the fitted knobs are put in
    gpu: str


def predicted_reserved_gib(ev) -> float:
    """The caching allocator's reserved peak the ledger implies: the heaviest stage's tensors (its memory less the
    NCCL / TE buffers, which their libraries allocate outside PyTorch's allocator) plus the allocator's
    fragmentation, the segments reserved that the tensors cannot use (``allocator_fragmentation`` of the GPU's
    memory, taken near the limit: costmodel/memory/runtime_memory.py). What torchtitan's memory line reports."""
    tensors = max(s.memory_gib - s.runtime_buffers_gib for s in ev.stages)
    return tensors + ev.metrics.memory_outside_ledger_gib.get("allocator_fragmentation", 0.0)


def _evaluate(spec, a):
    from parplan.library.evaluation import evaluate_spec

    return evaluate_spec(spec, None, assumptions=a)


def _generation_knobs(generation: str) -> tuple[str, ...]:
    if generation == "blackwell":
        return tuple(RATIO_PARAMS)
    return tuple(p.name for p in PARAMS if p.name.endswith("_" + generation))


SHARED_STEP_KNOBS = tuple(p.name for p in PARAMS if not any(p.name.endswith(g) for g in ("_ampere", "_hopper", "_flash2"))
                          and p.name not in RATIO_PARAMS) + ("host_seconds_per_kernel",)


def rows_of(measured: Measured) -> list[Row]:
    """The residual rows of everything measured (module docstring)."""
    from parplan.costmodel.spec.assumptions import resolve_assumptions
    from parplan.library.probe_rows import bandwidth_rows, collective_prediction, gpu_of, kernel_prediction

    rows: list[Row] = []
    for run in measured.runs:
        base = resolve_assumptions(run.spec.assumptions)
        generation = gpu_of(run.spec.cluster.gpu).generation
        knobs = _generation_knobs(generation) + SHARED_STEP_KNOBS
        rows.append(Row(run.name, "step time", run.step_time_s,
                        lambda a, spec=run.spec: _evaluate(spec, a).metrics.step_time_s, knobs, base, run.spec.cluster.gpu))
    default = resolve_assumptions(None)
    for k in measured.kernels:
        _, value, knobs = kernel_prediction(k.kind, k.gpu, k.shape, k.seconds, k.peak_tflops, default)
        rows.append(Row(k.where, k.kind, value, lambda a, k=k: kernel_prediction(k.kind, k.gpu, k.shape, k.seconds,
                                                                                  k.peak_tflops, a)[0],
                        knobs, default, k.gpu))
    for gpu, c in bandwidth_rows(measured.collectives):
        _, knobs = collective_prediction(gpu, c.op, c.ranks, c.ranks_per_node, default)
        rows.append(Row(c.where, f"{c.op} busbw", c.busbw_gbps,
                        lambda a, c=c, gpu=gpu: collective_prediction(gpu, c.op, c.ranks, c.ranks_per_node, a)[0],
                        knobs, default, gpu))
    if not rows:
        raise CalibrationError("nothing measured in the files given")
    gpus = {gpu_of(r.gpu).name for r in rows}
    if len(gpus) > 1:
        raise CalibrationError(f"rows on several GPUs ({', '.join(sorted(gpus))}): one profile per GPU type")
    return rows


def _params_and_priors(rows: list[Row]) -> tuple[dict[str, Param], dict[str, tuple[float, float, str]], dict[str, float]]:
    """Candidate Params, priors centred on the current defaults, and those defaults, for the knobs of ``rows``."""
    from parplan.costmodel.spec.calibration import RATIOS as DEFAULT_RATIOS
    from parplan.library.probe_rows import hbm_datasheet_gbps

    base = rows[0].base
    hbm = hbm_datasheet_gbps(rows[0].gpu)
    params = {p.name: p for p in PARAMS + EXTRA_PARAMS}
    params["hbm_bandwidth_gbps"] = Param("hbm_bandwidth_gbps", 0.3 * hbm, 1.2 * hbm, hbm, scale=hbm, why="HBM GB/s")
    priors = {**PRIORS, **EXTRA_PRIORS, "hbm_bandwidth_gbps": (hbm, 0.1 * hbm, "datasheet")}
    wanted = {k for r in rows for k in r.knobs}
    defaults = {}
    for name in wanted:
        value = DEFAULT_RATIOS.get(name) if name in RATIO_PARAMS else getattr(base, name, None)
        value = hbm if value is None and name == "hbm_bandwidth_gbps" else value
        if value is None:
            raise CalibrationError(f"assumptions.{name}: unset under the runs' preset (textbook?); calibrate fits the "
                                   "default preset's knobs")
        defaults[name] = float(value)
    out_priors = {}
    for name in wanted:
        p = params[name]
        sd = priors[name][1] if name in priors else (p.hi - p.lo) / 4.0
        out_priors[name] = (defaults[name], sd, "the default (costmodel/spec/calibration.py)")
    return {n: params[n] for n in sorted(wanted)}, out_priors, defaults


def _assumptions(row: Row, values: dict[str, float]):
    values = dict(values)
    for ratio in RATIO_PARAMS & set(values):  # the Blackwell knob = the row's Hopper value x the fitted ratio
        src = next(s for s, r in RATIOS.values() if r == ratio)
        values.setdefault(src, getattr(row.base, src))
    return assumptions_with(values, row.base)


def residuals(rows: list[Row], values: dict[str, float]) -> np.ndarray:
    """Every row's error with ``values`` put in, ``100·ln(predicted/measured)``: the percent error for small
    errors, and symmetric, so a CPU probe's rows 1000x off do not dominate a fit by their sign."""
    return np.array([100.0 * np.log(r.predict(_assumptions(r, values)) / r.measured) for r in rows])


def percent(residual: float) -> float:
    """A :func:`residuals` entry as the percent error ``100·(predicted/measured - 1)``."""
    return float(100.0 * np.expm1(residual / 100.0))


@dataclass
class Calibration:
    fitted: dict[str, float]
    defaults: dict[str, float]
    unconstrained: list[str]
    before_pct: list[float]
    after_pct: list[float]
    loo_pct: list[float]
    rows: list[Row]
    memory: list[tuple[str, float, float, float]] = field(default_factory=list)  # name, measured, before, after
    move_share: float = 1.0  # the share of the fitted move kept (cross_validated_share)


def constrained(rows: list[Row], params: dict[str, Param], priors: dict, defaults: dict[str, float]) -> list[str]:
    """The knobs whose one-sd move changes some row's prediction by at least SENSITIVITY_PCT (module docstring)."""
    at_default = residuals(rows, defaults)
    out = []
    for name, p in params.items():
        sd = priors[name][1]
        moved = min(p.hi, defaults[name] + sd) if defaults[name] + sd <= p.hi else max(p.lo, defaults[name] - sd)
        shift = np.abs(residuals(rows, {**defaults, name: moved}) - at_default)
        if shift.size and shift.max() >= SENSITIVITY_PCT:
            out.append(name)
    return out


def _fit(rows: list[Row], names: list[str], params, priors, defaults) -> dict[str, float]:
    if not names:
        return {}
    fixed = {k: v for k, v in defaults.items() if k not in names}
    result = fit_knobs(lambda v: residuals(rows, {**fixed, **v}), [params[n] for n in names],
                       {n: priors[n] for n in names}, starts=1, loss="linear", f_scale=1.0,
                       prior_points=PRIOR_POINTS, start={n: defaults[n] for n in names})
    return {k: float(v) for k, v in result.values.items()}


def moved(defaults: dict[str, float], values: dict[str, float], share: float) -> dict[str, float]:
    """``values`` taken ``share`` of the way from ``defaults`` (1: the fitted values, 0: the defaults)."""
    return {k: defaults[k] + share * (v - defaults[k]) for k, v in values.items()}


def cross_validated_share(rows: list[Row], loo_values: list[dict[str, float]], defaults: dict[str, float]) -> float:
    """The share of :data:`MOVE_SHARES` whose leave-one-out predictions (row i by the knobs fitted without it,
    ``loo_values[i]``, moved that share) have the least sum of squared residuals; 1 without leave-one-out fits."""
    if not loo_values:
        return 1.0

    def cost(share: float) -> float:
        return float(sum(residuals([row], {**defaults, **moved(defaults, values, share)})[0] ** 2
                         for row, values in zip(rows, loo_values)))

    costs = [cost(share) for share in MOVE_SHARES]
    return MOVE_SHARES[int(np.argmin(costs))]


def calibrate(measured: Measured, leave_one_out: bool = True) -> Calibration:
    """Fit the constrained knobs on every row and once more without each row (two rows or more); the move from the
    defaults is the share leave-one-out chooses (module docstring). ``leave_one_out``: report each row's
    leave-one-out error (at that share)."""
    rows = rows_of(measured)
    params, priors, defaults = _params_and_priors(rows)
    names = constrained(rows, params, priors, defaults)
    loo_values = [_fit(rows[:i] + rows[i + 1:], names, params, priors, defaults)
                  for i in range(len(rows))] if len(rows) > 1 else []
    share = cross_validated_share(rows, loo_values, defaults)
    fitted = moved(defaults, _fit(rows, names, params, priors, defaults), share)
    before = [percent(r) for r in residuals(rows, defaults)]
    after = [percent(r) for r in residuals(rows, {**defaults, **fitted})]
    loo = []
    if leave_one_out:
        for row, values in zip(rows, loo_values):
            loo.append(percent(residuals([row], {**defaults, **moved(defaults, values, share)})[0]))
    memory = []
    for run in measured.runs:
        if run.peak_memory_gib is None:
            continue
        row = next(r for r in rows if r.name == run.name)
        pick = predicted_reserved_gib if run.memory_kind == "reserved" else (lambda ev: ev.metrics.peak_memory_gib)
        memory.append((run.name, run.peak_memory_gib, pick(_evaluate(run.spec, _assumptions(row, defaults))),
                       pick(_evaluate(run.spec, _assumptions(row, {**defaults, **fitted})))))
    return Calibration(fitted, defaults, sorted(set(params) - set(names)), before, after, loo, rows, memory, share)


def profile_assumptions(cal: Calibration) -> dict[str, float]:
    """The fitted knobs as assumption overrides: ratios as the Blackwell knobs they set, ceilings raised where a
    fitted per-generation value passes its ceiling (the default preset's ceilings never bind)."""
    base = cal.rows[0].base
    values = {k: v for k, v in cal.fitted.items() if k not in RATIO_PARAMS}
    if RATIO_PARAMS & set(cal.fitted):
        full = {**{src: getattr(base, src) for src, _ in RATIOS.values()}, **cal.fitted}
        values.update({k: v for k, v in derived_values(full).items() if RATIOS[k][1] in cal.fitted})
    for ceiling, stem in CEILINGS.items():
        top = max((v for k, v in values.items() if k.startswith(stem)), default=None)
        if top is not None and getattr(base, ceiling) is not None and top > getattr(base, ceiling):
            values[ceiling] = top
    return {k: float(f"{v:.6g}") for k, v in sorted(values.items())}


def report_lines(cal: Calibration) -> list[str]:
    """What calibrate prints: each knob's move, each row's error before/after/left out, memory."""
    out = [f"{'knob':34s} {'default':>11s} {'fitted':>11s} {'move':>8s}"]
    for name, value in cal.fitted.items():
        d = cal.defaults[name]
        move = f"{100 * (value / d - 1):+7.1f}%" if d else "      -"
        out.append(f"{name:34s} {d:11.5g} {value:11.5g} {move}")
    if cal.unconstrained:
        out.append("not constrained by these rows (defaults kept): " + ", ".join(cal.unconstrained))
    out.append(f"move kept: {cal.move_share:g} of the fitted move from the defaults (chosen by leave-one-out"
               f"{'' if len(cal.rows) > 1 else '; one row: in full'})")
    out += ["", f"{'row':40s} {'kind':16s} {'before':>8s} {'after':>8s} {'left out':>9s}"]
    for i, r in enumerate(cal.rows):
        loo = f"{cal.loo_pct[i]:+8.1f}%" if cal.loo_pct else "        -"
        out.append(f"{r.name[-40:]:40s} {r.kind:16s} {cal.before_pct[i]:+7.1f}% {cal.after_pct[i]:+7.1f}% {loo}")
    med = lambda xs: statistics.median(abs(x) for x in xs) if xs else float("nan")  # noqa: E731
    out.append(f"median |error|: before {med(cal.before_pct):.1f} %, after {med(cal.after_pct):.1f} %, "
               f"leave-one-out {med(cal.loo_pct):.1f} % ({len(cal.rows)} rows)")
    for name, measured, before, after in cal.memory:
        out.append(f"peak memory {name}: measured {measured:.2f} GiB, predicted {before:.2f} (after {after:.2f}; "
                   "memory knobs not fitted)")
    return out


def profile_document(cal: Calibration, sources: list[dict[str, Any]], now: Optional[_dt.datetime] = None) -> dict:
    """The profile's YAML mapping (library/profile.py)."""
    from parplan import __version__

    now = now or _dt.datetime.now(_dt.timezone.utc)
    med = lambda xs: round(statistics.median(abs(x) for x in xs), 2) if xs else None  # noqa: E731
    return {
        "kind": PROFILE_KIND, "version": PROFILE_VERSION, "created": now.strftime("%Y-%m-%dT%H:%MZ"),
        "parplan": __version__, "gpu": cal.rows[0].gpu, "assumptions": profile_assumptions(cal), "sources": sources,
        "fit": {"row_count": len(cal.rows), "knobs": {k: {"default": round(cal.defaults[k], 6), "fitted": round(v, 6)}
                                                 for k, v in cal.fitted.items()},
                "unconstrained": cal.unconstrained, "move_share": cal.move_share,
                "median_abs_error_pct": {"before": med(cal.before_pct), "after": med(cal.after_pct),
                                         "leave_one_out": med(cal.loo_pct)},
                "rows": [{"row": r.name, "kind": r.kind, "before_pct": round(b, 2), "after_pct": round(a, 2),
                          **({"left_out_pct": round(cal.loo_pct[i], 2)} if cal.loo_pct else {})}
                         for i, (r, b, a) in enumerate(zip(cal.rows, cal.before_pct, cal.after_pct))],
                # peak memory, measured and predicted with the fitted knobs: the profile's memory band
                # (costmodel/evaluation/prediction_band.py profile_source)
                "memory": [{"row": name, "measured_gib": round(m, 4), "predicted_gib": round(after, 4)}
                           for name, m, _, after in cal.memory]},
    }


__all__ = ["calibrate", "Calibration", "CalibrationError", "report_lines", "profile_document", "profile_assumptions",
           "predicted_reserved_gib", "rows_of", "residuals", "SENSITIVITY_PCT", "MOVE_SHARES", "moved",
           "cross_validated_share"]
