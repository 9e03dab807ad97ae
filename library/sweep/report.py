"""What a sweep writes: ``points.jsonl`` (one record per point), ``points.csv``, ``points.parquet`` (where
pyarrow is installed), ``summary.json`` (the Pareto set and the scaling curves with their knees), and with the
``plot`` extra ``scaling.png`` and ``cost_time.png``; and the rich table on the terminal."""

from __future__ import annotations

import csv
import json
import os
from typing import Any, Optional

from rich import box
from rich.console import Console
from rich.table import Table

from parplan.library.sweep.records import short_plan

CSV_COLUMNS = ("index", "key", "model", "gpu", "num_gpus", "seq_len", "global_batch_size", "status", "plan",
               "step_time_s", "tokens_per_s", "mfu", "peak_memory_gib", "tokens_per_step", "steps", "time_to_train_h",
               "gpu_hours", "cost_usd", "energy_kwh", "meets_deadline", "pareto", "scaling_efficiency", "knee",
               "axes", "explanation", "error")


def flat_row(rec: dict[str, Any]) -> dict[str, Any]:
    row = {k: rec.get(k) for k in CSV_COLUMNS}
    row["plan"] = short_plan(rec["plans"][0]["plan"]) if rec["plans"] else None
    row["axes"] = json.dumps(rec["axes"], sort_keys=True, default=str)
    ex = rec.get("explanation")
    row["explanation"] = ex["summary"] if ex else None
    return row


def write_jsonl(records: list[dict[str, Any]], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, sort_keys=False, ensure_ascii=False, allow_nan=False) + "\n")


def write_csv(records: list[dict[str, Any]], path: str) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for rec in records:
            writer.writerow(flat_row(rec))


def write_parquet(records: list[dict[str, Any]], path: str) -> bool:
    """The CSV's columns as Parquet; False (nothing written) without pyarrow (``pip install pyarrow``)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return False
    rows = [flat_row(rec) for rec in records]
    for row, rec in zip(rows, records):
        row["plans"] = json.dumps(rec["plans"], sort_keys=False)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return True


def _hours(h: Optional[float]) -> str:
    if h is None:
        return "-"
    return f"{h / 24:.1f} d" if h >= 48 else f"{h:.1f} h"


def _num(x: Optional[float], fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


TABLE_ROWS = 60  # more points than this: the table shows the Pareto set, the knees and the first points


def render_table(records: list[dict[str, Any]], summary: dict[str, Any], console: Console,
                 limit: int = TABLE_ROWS) -> None:
    total = len(records)
    if total > limit:
        marked = [r for r in records if r["pareto"] or r["knee"]][:limit]
        keep = {r["index"] for r in marked}
        keep |= set([r["index"] for r in records if r["index"] not in keep][: max(0, limit - len(keep))])
        records = [r for r in records if r["index"] in keep]
    axis_keys = list(dict.fromkeys(k for r in records for k in r["axes"]))
    table = Table(box=box.SIMPLE_HEAD, title="Capacity sweep", title_justify="left")
    table.add_column("#", justify="right")
    for key in axis_keys:
        table.add_column(key)
    for name in ("status", "best plan"):
        table.add_column(name)
    for name in ("step s", "tokens/s", "MFU", "to train", "GPU-h", "cost $", "kWh", "eff", ""):
        table.add_column(name, justify="right")
    for r in records:
        values = []
        for key in axis_keys:
            v = r["axes"].get(key, "")
            values.append(v if isinstance(v, str) else json.dumps(v, default=str))
        marks = ("P" if r["pareto"] else "") + ("K" if r["knee"] else "")
        status = r["status"] if r["status"] not in ("ERROR",) else f"ERROR: {r['error']}"
        if r["status"] == "INFEASIBLE" and r.get("explanation"):
            status = f"INFEASIBLE: {r['explanation']['summary']}"
        table.add_row(str(r["index"]), *values, status, short_plan(r["plans"][0]["plan"]) if r["plans"] else "-",
                      _num(r["step_time_s"], ".2f"), _num(r["tokens_per_s"], ",.0f"),
                      _num(r["mfu"] * 100 if r["mfu"] is not None else None, ".1f"), _hours(r["time_to_train_h"]),
                      _num(r["gpu_hours"], ",.0f"), _num(r["cost_usd"], ",.0f"), _num(r["energy_kwh"], ",.0f"),
                      _num(r["scaling_efficiency"], ".2f"), marks)
    console.print(table)
    if total > len(records):
        console.print(f"{len(records)} of {total} points shown (the Pareto set and knees first); every point is "
                      f"in points.csv and points.jsonl")
    console.print(f"P: on the {summary['pareto_axis'].replace('_', ' ')} x time-to-train Pareto set; "
                  f"K: the knee of its scaling curve (records.scaling_curves)")


def plot(records: list[dict[str, Any]], summary: dict[str, Any], out_dir: str) -> list[str]:
    """``scaling.png`` (tokens/s and scaling efficiency against GPU count, one line per model and GPU type,
    the knee starred) and ``cost_time.png`` (cost or GPU-hours against time to train, the Pareto set joined).
    Needs matplotlib (``pip install 'parplan[plot]'``); returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if summary["curves"]:
        written.append(_plot_scaling(plt, summary["curves"], out_dir))
    axis = summary["pareto_axis"]
    timed = [r for r in records if r["time_to_train_h"] is not None and r[axis] is not None]
    if timed:
        written.append(_plot_cost_time(plt, timed, axis, out_dir))
    return written


def _plot_scaling(plt, curves: list[dict[str, Any]], out_dir: str) -> str:
    """``scaling.png``: tokens/s and scaling efficiency against GPU count per curve, the knee starred."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for c in curves:
        rest = ", ".join(f"{k}={v}" for k, v in c["axes"].items())
        label = f"{c['model']} on {c['gpu']}" + (f" ({rest})" if rest else "")
        xs = [p["num_gpus"] for p in c["points"]]
        (line,) = ax1.plot(xs, [p["tokens_per_s"] for p in c["points"]], marker="o", label=label)
        ax2.plot(xs, [p["efficiency"] for p in c["points"]], marker="o", color=line.get_color())
        knee = next(p for p in c["points"] if p["num_gpus"] == c["knee_gpus"])
        if not c["knee_reached"]:
            continue
        ax1.plot([knee["num_gpus"]], [knee["tokens_per_s"]], marker="*", markersize=16, color=line.get_color(),
                 markeredgecolor="black")
        ax2.plot([knee["num_gpus"]], [knee["efficiency"]], marker="*", markersize=16, color=line.get_color(),
                 markeredgecolor="black")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(alpha=0.3)
    ax1.set_yscale("log")
    ax1.set_ylabel("tokens/s (best plan)")
    ax2.set_ylabel("scaling efficiency")
    ax1.set_title("Scaling (star: the knee)")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out_dir, "scaling.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_cost_time(plt, timed: list[dict[str, Any]], axis: str, out_dir: str) -> str:
    """``cost_time.png``: cost (or GPU-hours) against time to train per GPU type, the Pareto set joined."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for gpu in sorted({r["gpu"] for r in timed}):
        rs = [r for r in timed if r["gpu"] == gpu]
        ax.scatter([r["time_to_train_h"] / 24 for r in rs], [r[axis] for r in rs], label=gpu, alpha=0.8)
    front = sorted((r for r in timed if r["pareto"]), key=lambda r: r["time_to_train_h"])
    ax.plot([r["time_to_train_h"] / 24 for r in front], [r[axis] for r in front], color="black", lw=1,
            marker="D", mfc="none", markersize=9, label="Pareto set")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("time to train the budget (days)")
    ax.set_ylabel("cost ($, your prices)" if axis == "cost_usd" else "GPU-hours")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax.set_title("Cost vs time to train")
    fig.tight_layout()
    path = os.path.join(out_dir, "cost_time.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_outputs(records: list[dict[str, Any]], summary: dict[str, Any], out_dir: str,
                  plots: Optional[bool] = None) -> list[str]:
    """Every output file; ``plots`` None: draw them when matplotlib is installed."""
    os.makedirs(out_dir, exist_ok=True)
    write_jsonl(records, os.path.join(out_dir, "points.jsonl"))
    write_csv(records, os.path.join(out_dir, "points.csv"))
    written = [os.path.join(out_dir, n) for n in ("points.jsonl", "points.csv", "summary.json")]
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(summary, indent=1, allow_nan=False) + "\n")
    if write_parquet(records, os.path.join(out_dir, "points.parquet")):
        written.append(os.path.join(out_dir, "points.parquet"))
    if plots is not False:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            if plots:
                raise
        else:
            written += plot(records, summary, out_dir)
    return written


__all__ = ["write_outputs", "write_jsonl", "write_csv", "write_parquet", "render_table", "plot", "CSV_COLUMNS"]
