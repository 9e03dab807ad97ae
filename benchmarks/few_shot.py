"""Few-shot calibration per job: fit on k runs of a job with ``solver-cli calibrate``'s machinery, predict the others.

Issue 38 item 5. For each job of ``benchmarks/ranking.py`` (one source's configurations of one model on one GPU type,
GPU count and sequence length) and each k in :data:`KS` smaller than the job's configuration count, **every subset of
k configurations** (itertools.combinations over the configurations in ranking.py's order, by measured throughput) is
given to :func:`parplan.library.calibrate.calibrate` as measured runs (its spec, the plan ranking.py priced, the
measured step time = tokens per step / measured tokens/s), which fits the knobs those runs constrain with the default
calibration as priors (never a constant per row; library/calibrate.py). The fitted values then predict the job's
other configurations. Per job and k, averaged over the subsets:

* median |step-time error| of the held-out configurations, before (the default calibration, calibrate's own
  ``before``) and after (the fitted knobs put in);
* Spearman's rho of predicted vs measured throughput over *all* the job's configurations, before and after.

Jobs whose configurations are one model input (ranking.py ``identical_inputs``) are left out: a calibration on one
cannot tell the other apart. Needs scipy (the ``fit`` extra).
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any, Sequence, TextIO

from benchmarks.ranking import spearman
from benchmarks.row_mapping import express
from parplan.costmodel.spec.assumptions import AssumptionsSpec
from parplan.costmodel.spec.spec import Plan

KS = (1, 2, 3)


def config_run(config: dict[str, Any], preset: str = "default"):
    """One configuration as a calibrate Run: the row's spec (its assumption overrides under ``preset``) with the plan
    ranking.py priced (a completion where the row's mapped plan did not fit), and its measured step time."""
    from parplan.library.measured_runs import Run

    ex = express(config["row"])
    spec = ex.spec.model_copy(update={"assumptions": AssumptionsSpec(preset=preset, **ex.overrides),
                                      "plan": Plan.model_validate(config["plan_json"])})
    step_s = config["tokens"] / config["measured"]
    return Run(config["ids"][0], spec, step_s, None, "allocated", config["ids"][0])


def _abs_median(values: Sequence[float]) -> float:
    return statistics.median(abs(v) for v in values)


def _throughputs(rows, values: dict[str, float]) -> list[float]:
    """Predicted tokens/s up to the job's common tokens per step (ranks only): 1 / predicted step time."""
    from parplan.library.calibrate import _assumptions

    return [1.0 / r.predict(_assumptions(r, values)) for r in rows]


def subset_scores(runs: list, subset: tuple[int, ...]) -> dict[str, float]:
    """Calibrate on ``runs[subset]``; errors (%) of the others and rho over all, before and after."""
    from parplan.library.calibrate import _params_and_priors, calibrate, percent, residuals, rows_of
    from parplan.library.measured_runs import Measured

    rows = rows_of(Measured(runs=list(runs)))
    defaults = _params_and_priors(rows)[2]
    cal = calibrate(Measured(runs=[runs[i] for i in subset]), leave_one_out=False)
    after = {**defaults, **cal.fitted}
    held = [rows[i] for i in range(len(rows)) if i not in subset]
    measured = [1.0 / r.measured for r in rows]
    return {"before": _abs_median([percent(e) for e in residuals(held, defaults)]),
            "after": _abs_median([percent(e) for e in residuals(held, after)]),
            "rho_before": spearman(_throughputs(rows, defaults), measured),
            "rho_after": spearman(_throughputs(rows, after), measured),
            "knobs": len(cal.fitted)}


def job_few_shot(job: dict[str, Any], ks: Sequence[int] = KS) -> list[dict[str, Any]]:
    """Per k (< the job's configurations): the mean over every k-subset of :func:`subset_scores`."""
    runs = [config_run(c) for c in job["configs"]]
    out = []
    for k in ks:
        if k >= len(runs):
            continue
        scores = [subset_scores(runs, s) for s in itertools.combinations(range(len(runs)), k)]
        mean = {key: statistics.fmean(s[key] for s in scores) for key in scores[0]}
        out.append({"k": k, "subsets": len(scores), **mean})
    return out


def evaluate_few_shot(table: list[dict[str, Any]], ks: Sequence[int] = KS) -> list[dict[str, Any]]:
    """Every job of ranking.py's table but those of one model input, with its :func:`job_few_shot` lines."""
    return [{**j, "few_shot": job_few_shot(j, ks)} for j in table if not j["identical_inputs"]]


def render_few_shot(jobs: list[dict[str, Any]], out: TextIO, ks: Sequence[int] = KS) -> dict[int, dict[str, float]]:
    """The per-job table and, per k, the medians over jobs; returns those medians."""
    w = lambda s="": print(s, file=out)  # noqa: E731
    w(f"{'source':26s} {'model':32s} {'GPUs':22s} {'n':>2s} {'k':>2s} {'subsets':>7s} {'|err| before':>12s} "
      f"{'after':>7s} {'rho before':>10s} {'after':>6s}")
    per_k: dict[int, list[dict[str, float]]] = {}
    for j in jobs:
        for line in j["few_shot"]:
            per_k.setdefault(line["k"], []).append(line)
            w(f"{j['source'][:26]:26s} {j['model'][:32]:32s} {str(j['gpus']) + ' x ' + j['gpu']:22s} {j['n']:2d} "
              f"{line['k']:2d} {line['subsets']:7d} {line['before']:11.1f}% {line['after']:6.1f}% "
              f"{line['rho_before']:+10.2f} {line['rho_after']:+6.2f}")
    w()
    summary = {}
    for k in ks:
        lines = per_k.get(k, [])
        if not lines:
            w(f"k = {k}: no job has more than {k} configurations")
            continue
        summary[k] = {key: statistics.median(l[key] for l in lines) for key in ("before", "after")}
        w(f"k = {k}: {len(lines)} jobs; median over jobs of the held-out median |step-time error|: "
          f"before {summary[k]['before']:.1f} %, after {summary[k]['after']:.1f} %")
    return summary


__all__ = ["KS", "config_run", "subset_scores", "job_few_shot", "evaluate_few_shot", "render_few_shot"]
