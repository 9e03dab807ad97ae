#!/usr/bin/env python3
"""Does the cost model rank configurations of one job the way the measurements do?

    python benchmarks/ranking.py [--data FILE ...] [--out benchmarks/results/ranking.txt] [--preset default]

Default data: the published runs (``data/published-runs.yaml``), the held-out rows (``data/heldout-runs.yaml``) and
the MLPerf Training v5.1 rows (``data/mlperf-v5.1.yaml``). A **job** is one source's runs of one model on one GPU
type, GPU count and sequence length (e.g. MLPerf's Llama 3.1 8B on 64 B200, the torchtitan 2024-12 Llama 3.1 8B
on 8 H100 runs). Within a job every row is a configuration (rows on the same degrees differ in a technique, container or
precision), except MLPerf submissions of one config (same plan, global batch and precision by several
submitters), which are one configuration measured as their median. A job
needs at least two configurations.

Per job, over its configurations' throughput (tokens/s, from each row's published metric under its own FLOP
accounting, and the model's prediction with today's calibration; nothing is refitted):

* Spearman's rho of predicted vs measured (average ranks for ties; n = 2 gives +-1, shown but left out of the
  median, which is over jobs with 3 or more configurations);
* regret of the model's pick: the best measured throughput / the measured throughput of the configuration the
  model ranks first (1.00 = the model picks the measured best; among tied first choices the worst measured).
  A job whose configurations are all one input to the model (e.g. a software-optimization history on one plan)
  gets one prediction for all; it is shown but not counted in the regret summary.

Rows the model cannot express, or whose plan it says does not fit, still count in the job (the model still
prices them; fitting is reported by ``published_runs.py``). This is a report; exit status 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Optional, Sequence, TextIO

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.runs import HELDOUT_DATA, compare, default_data_path, load_runs  # noqa: E402

MLPERF_DATA = ROOT / "benchmarks" / "data" / "mlperf-v5.1.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "ranking.txt"

# sources by id prefix for the rows without a source_id (benchmarks/fit.py's SOURCES, without importing numpy)
_PREFIXES = (("narayanan2021", "Narayanan 2021"), ("megatron-readme2021", "Megatron README 2021"),
             ("korthikanti2022", "Korthikanti 2022"), ("mcore-readme2024", "Megatron-Core 2024"),
             ("mcore-dsv3-gb200", "Megatron-Core DSv3 GB200"), ("deepseek-v3", "DeepSeek-V3"),
             ("nemo2407", "NeMo 24.07"), ("nemo-longseq", "NeMo long-seq"), ("torchtitan", "torchtitan 2024-12"),
             ("llmfoundry", "LLM Foundry"), ("bridge", "Megatron-Bridge"), ("llama3-paper", "Llama 3 paper"))


def source_of(row: dict) -> str:
    if row.get("source_id"):
        return str(row["source_id"])
    rid = row.get("id", "")
    return next((label for prefix, label in _PREFIXES if rid.startswith(prefix)), rid.split("-")[0])


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties given their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's correlation of the (tie-averaged) ranks; nan if either side is constant."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("spearman needs two sequences of the same length >= 2")
    rx, ry = ranks(x), ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return float("nan") if sxx == 0 or syy == 0 else sxy / (sxx * syy) ** 0.5


def regret(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Best measured / measured of the model's first choice (the worst of tied first choices)."""
    top = max(predicted)
    picked = min(m for p, m in zip(predicted, measured) if p == top)
    return max(measured) / picked


def job_key(row: dict, result: dict) -> tuple:
    spec = result["spec"]
    return (source_of(row), row.get("model") or spec["model"]["name"], spec["cluster"]["gpu"],
            spec["cluster"]["num_gpus"], spec["training"]["seq_len"])


def collect(rows: Sequence[dict], preset: str = "default") -> dict[tuple, list[dict[str, Any]]]:
    """Jobs -> configurations (plan, global batch, measured and predicted tokens/s, row ids)."""
    jobs: dict[tuple, dict[tuple, dict[str, Any]]] = {}
    for row in rows:
        if row.get("not_expressible"):
            continue
        r = compare(row, preset)
        if not r.get("expressed") or r.get("published_step_time_s") is None:
            continue
        tokens = r["spec"]["training"]["global_batch_size"] * r["spec"]["training"]["seq_len"]
        # rows of one source are distinct configurations (another technique, container or precision on the same
        # degrees), except repeated submissions of one MLPerf config (same plan, batch and precision)
        conf = (r["plan_summary"], r["spec"]["training"]["global_batch_size"], r["precision"],
                None if row.get("source_id") else row["id"])
        c = jobs.setdefault(job_key(row, r), {}).setdefault(conf, {"plan": conf[0], "gbs": conf[1], "ids": [],
                                                                      "measured_all": [], "fits": r["fits"],
                                                                      "precision": r["precision"], "row": row,
                                                                      "plan_json": r["plan"], "tokens": tokens})
        c["ids"].append(r["id"])
        c["measured_all"].append(tokens / r["published_step_time_s"])
        c["predicted"] = tokens / r["step_time_s"]
    out = {}
    for key, confs in jobs.items():
        if len(confs) >= 2:
            for c in confs.values():
                c["measured"] = statistics.median(c["measured_all"])
            out[key] = sorted(confs.values(), key=lambda c: -c["measured"])
    return out


def _label(c: dict[str, Any]) -> str:
    return c["ids"][0] if len(c["ids"]) == 1 else f"{c['plan']} {c['precision']} gbs {c['gbs']}"


def evaluate_jobs(jobs: dict[tuple, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    table = []
    for key, confs in sorted(jobs.items(), key=lambda kv: [str(k) for k in kv[0]]):
        meas = [c["measured"] for c in confs]
        pred = [c["predicted"] for c in confs]
        pick = max(range(len(confs)), key=lambda i: (pred[i], -meas[i]))
        table.append({"source": key[0], "model": key[1], "gpu": key[2], "gpus": key[3], "seq": key[4],
                      "n": len(confs), "rows": sum(len(c["ids"]) for c in confs), "spearman": spearman(pred, meas),
                      "regret": regret(pred, meas), "model_pick": _label(confs[pick]), "best": _label(confs[0]),
                      "identical_inputs": len(set(pred)) == 1, "configs": confs})
    return table


def render(table: list[dict[str, Any]], out: TextIO, detail: bool = True) -> dict[str, Any]:
    w = lambda s="": print(s, file=out)  # noqa: E731
    header = ["source", "model", "GPUs", "seq", "configs (rows)", "spearman", "regret", "model's pick / measured best"]
    lines = []
    for j in table:
        rho = "nan" if j["spearman"] != j["spearman"] else f"{j['spearman']:+.2f}"
        pick = "same" if j["model_pick"] == j["best"] else f"{j['model_pick']} / {j['best']}"
        if j["identical_inputs"]:
            pick = "one prediction for all (same model inputs); not counted: " + pick
        lines.append([j["source"], j["model"], f"{j['gpus']} x {j['gpu']}", str(j["seq"]), f"{j['n']} ({j['rows']})",
                      rho + ("" if j["n"] >= 3 else " (n=2)"), f"{j['regret']:.3f}", pick])
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(wd) for c, wd in zip(cells, widths)).rstrip()  # noqa: E731
    w(fmt(header))
    w(fmt(["-" * wd for wd in widths]))
    for l in lines:
        w(fmt(l))
    ranked = [j["spearman"] for j in table if j["n"] >= 3 and j["spearman"] == j["spearman"]]
    regrets = [j["regret"] for j in table if not j["identical_inputs"]]
    summary = {"jobs": len(table), "jobs_identical_inputs": sum(1 for j in table if j["identical_inputs"]), "jobs_with_3_or_more": len(ranked),
               "median_spearman": statistics.median(ranked) if ranked else float("nan"),
               "min_spearman": min(ranked) if ranked else float("nan"),
               "max_regret": max(regrets) if regrets else float("nan"),
               "jobs_regret_le_1_03": sum(1 for r in regrets if r <= 1.03 + 1e-12)}
    w()
    w(f"jobs: {summary['jobs']} ({summary['jobs_with_3_or_more']} with 3+ configurations); median Spearman over those: "
      f"{summary['median_spearman']:+.2f} (min {summary['min_spearman']:+.2f}); regret <= 1.03 in "
      f"{summary['jobs_regret_le_1_03']} of {len(regrets)} (max {summary['max_regret']:.3f}; "
      f"{summary['jobs_identical_inputs']} job(s) whose configurations are one input to the model not counted)")
    if detail:
        w()
        w("Per job, configurations by measured throughput (tokens/s; predicted / measured):")
        for j in table:
            w(f"  {j['source']} | {j['model']} | {j['gpus']} x {j['gpu']} | seq {j['seq']}")
            for c in j["configs"]:
                w(f"    {', '.join(c['ids'])}")
                spread = "" if len(c["measured_all"]) == 1 else \
                    f" (median of {len(c['measured_all'])}: {min(c['measured_all']):,.0f}-{max(c['measured_all']):,.0f})"
                w(f"      {c['plan']:<42} {c['precision']:<4} gbs {c['gbs']:<5} measured {c['measured']:>11,.0f}{spread}  predicted "
                  f"{c['predicted']:>11,.0f}  {c['predicted'] / c['measured']:.2f}x{'' if c['fits'] else '  !fit'}")
    return summary


def default_data() -> list[Path]:
    return [p for p in (default_data_path(), HELDOUT_DATA, MLPERF_DATA) if Path(p).exists()]


def main(argv: Optional[list[str]] = None, out: TextIO = sys.stdout) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, action="append", default=None, help="data files (default: all three)")
    p.add_argument("--out", type=Path, default=None, help=f"also write the report here (e.g. {RESULTS.relative_to(ROOT)})")
    p.add_argument("--preset", default="default")
    p.add_argument("--few-shot", action="store_true", help="also calibrate on k runs of each job and predict the "
                   "rest (benchmarks/few_shot.py; needs scipy); recorded in ranking_few_shot.txt beside --out")
    args = p.parse_args(argv)
    paths = args.data or default_data()
    rows = [r for path in paths for r in load_runs(path)]
    table = evaluate_jobs(collect(rows, args.preset))
    import io
    buf = io.StringIO()
    print(f"Ranking: predicted vs measured throughput within each job (preset {args.preset}; data "
          f"{', '.join(str(Path(x).resolve().relative_to(ROOT)) if Path(x).resolve().is_relative_to(ROOT) else str(x) for x in paths)})",
          file=buf)
    print(file=buf)
    render(table, buf)
    out.write(buf.getvalue())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(buf.getvalue())
    if args.few_shot:
        _few_shot(table, argv, args.out, out)
    return 0


def _few_shot(table: list[dict[str, Any]], argv: Optional[list[str]], out_path: Optional[Path], out: TextIO) -> None:
    """``--few-shot``: benchmarks/few_shot.py's table, printed and (with ``--out``) written beside the report."""
    import io

    from benchmarks.few_shot import KS, evaluate_few_shot, render_few_shot

    buf = io.StringIO()
    command = " ".join(["python benchmarks/ranking.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"# Command: {command}", file=buf)
    print(f"Few-shot calibration per job (benchmarks/few_shot.py): calibrate on every subset of k configurations "
          f"(k = {', '.join(map(str, KS))}), predict the others; errors are of the held-out configurations' step "
          "times, rho over all the job's configurations; each line the mean over its subsets", file=buf)
    print(file=buf)
    render_few_shot(evaluate_few_shot(table), buf)
    out.write("\n" + buf.getvalue())
    if out_path:
        out_path.with_name("ranking_few_shot.txt").write_text(buf.getvalue())


if __name__ == "__main__":
    sys.exit(main())
