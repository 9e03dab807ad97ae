"""Per-point records and the figures across points: the cost x time Pareto set, scaling curves and knees.

A record (one line of ``points.jsonl``) holds the point's ``index``, ``key`` and ``axes`` values, the spec's
model / GPU / GPU count / sequence length / batch, the solve's ``status``, its ``plans`` in the CONTRACT
shape (``{"plan", "metrics"}``, top-K when asked), the explanation when nothing fits, and derived figures:

* ``tokens_per_step`` = global batch x sequence length; ``steps`` = the budget's steps, or
  ceil(budget tokens / tokens per step); ``time_to_train_h`` = steps x step time / 3600;
* ``gpu_hours`` = GPUs x time to train; ``cost_usd`` = GPU-hours x your price for that GPU type (None
  without a price: parplan has no built-in prices);
* ``energy_kwh`` = GPU-hours x board power (kW, the hardware catalog's cited ``board_power_w``) x
  ``energy.utilisation`` x ``energy.pue``. The utilisation model is deliberately simple: a GPU of the job
  draws a constant fraction (default 1.0: its full board power, an upper bound) of its board power for the
  whole run, and the facility multiplies that by its PUE; host CPUs, NICs and switches are not counted;
* ``meets_deadline`` when a deadline is given.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from parplan.costmodel.spec.hardware import CATALOG, resolve_gpu_name

KNEE_MARGINAL_EFFICIENCY = 0.5


def _gpu_name(name: str) -> str:
    try:
        return resolve_gpu_name(name)[0]
    except Exception:
        return name


def make_record(index: int, key: str, axes: dict[str, Any], spec: dict[str, Any], entry: Optional[dict[str, Any]],
                sweep: dict[str, Any]) -> dict[str, Any]:
    """One record from a stored solve (``entry`` None: not solved yet) and the sweep settings (its
    ``budget``, ``deadline_h``, ``prices``, ``energy`` as a JSON mapping)."""
    gpu = _gpu_name(spec["cluster"]["gpu"])
    num_gpus = spec["cluster"]["num_gpus"]
    seq, gbs = spec["training"]["seq_len"], spec["training"]["global_batch_size"]
    rec: dict[str, Any] = {"index": index, "key": key, "axes": axes, "model": spec["model"].get("name") or "model",
                           "gpu": gpu, "num_gpus": num_gpus, "seq_len": seq, "global_batch_size": gbs}
    derived = dict.fromkeys(("step_time_s", "tokens_per_s", "mfu", "peak_memory_gib", "tokens_per_step", "steps",
                             "time_to_train_h", "gpu_hours", "cost_usd", "energy_kwh", "meets_deadline"))
    rec.update(status="PENDING", error=None, explanation=None, plans=[], solver=None)
    if entry is not None:
        if "error" in entry:
            rec.update(status="ERROR", error=entry["error"])
        else:
            result = entry["result"]
            rec.update(status=result["status"], plans=result["plans"], solver=result["solver"])
            if result.get("explanation"):
                rec["explanation"] = result["explanation"]
        if "solve_s" in entry:
            rec["solve_s"] = entry["solve_s"]
    rec.update(derived)
    if rec["plans"]:
        metrics = rec["plans"][0]["metrics"]
        tokens_per_step = seq * gbs
        rec.update(step_time_s=metrics["step_time_s"], tokens_per_s=metrics["tokens_per_s"], mfu=metrics["mfu"],
                   peak_memory_gib=metrics["peak_memory_gib"], tokens_per_step=tokens_per_step)
        budget = sweep.get("budget")
        if budget:
            steps = budget["steps"] if budget.get("steps") else math.ceil(budget["tokens"] / tokens_per_step)
            hours = steps * metrics["step_time_s"] / 3600.0
            gpu_hours = hours * num_gpus
            price = {_gpu_name(k): v for k, v in (sweep.get("prices") or {}).items()}.get(gpu)
            energy = sweep.get("energy") or {"utilisation": 1.0, "pue": 1.0}
            power = CATALOG[gpu].board_power_w if gpu in CATALOG else None
            rec.update(steps=steps, time_to_train_h=hours, gpu_hours=gpu_hours,
                       cost_usd=gpu_hours * price if price is not None else None,
                       energy_kwh=(gpu_hours * power / 1000.0 * energy["utilisation"] * energy["pue"]
                                   if power else None))
            if sweep.get("deadline_h") is not None:
                rec["meets_deadline"] = hours <= sweep["deadline_h"]
    rec["pareto"] = False
    rec["scaling_efficiency"] = None
    rec["knee"] = False
    return rec


def pareto_axis(records: list[dict[str, Any]]) -> str:
    """``cost_usd`` when every point with a time to train has a cost (a price for its GPU type), else ``gpu_hours``."""
    timed = [r for r in records if r["time_to_train_h"] is not None]
    return "cost_usd" if timed and all(r["cost_usd"] is not None for r in timed) else "gpu_hours"


def mark_pareto(records: list[dict[str, Any]]) -> str:
    """Mark the points no other point beats on both cost (or GPU-hours) and time to train (ties kept)."""
    axis = pareto_axis(records)
    timed = [r for r in records if r["time_to_train_h"] is not None and r[axis] is not None]
    for r in timed:
        r["pareto"] = not any(o[axis] <= r[axis] and o["time_to_train_h"] <= r["time_to_train_h"]
                              and (o[axis] < r[axis] or o["time_to_train_h"] < r["time_to_train_h"]) for o in timed)
    return axis


def curve_group(record: dict[str, Any]) -> tuple[str, str, str]:
    """A scaling curve: one model on one GPU type with every other axis fixed (only the GPU count varies)."""
    rest = {k: v for k, v in record["axes"].items() if k not in ("cluster.num_gpus", "cluster.gpu", "model")}
    return record["model"], record["gpu"], json.dumps(rest, sort_keys=True, default=str)


def scaling_curves(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model, GPU type (and other axes): tokens/s and scaling efficiency against GPU count, knee marked.

    Scaling efficiency at N GPUs = (tokens/s per GPU at N) / (tokens/s per GPU at the smallest N that
    fits). The knee rule: walk the GPU counts upward; the marginal efficiency of a step N_a -> N_b is
    ((T_b - T_a) / (N_b - N_a)) / (T_0 / N_0): what each added GPU contributes, as a share of what a GPU
    contributes at the smallest count. The knee is the last count reached before the first step whose
    marginal efficiency falls below KNEE_MARGINAL_EFFICIENCY (0.5: an added GPU brings less than half a
    GPU's worth); ``knee_reached`` is False when no step falls below it (``knee_gpus`` is then the largest
    count, a lower bound, and no record is marked). A curve needs two GPU counts that fit."""
    groups: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    for r in records:
        if r["tokens_per_s"] is None:
            continue
        by_n = groups.setdefault(curve_group(r), {})
        if r["num_gpus"] not in by_n or r["tokens_per_s"] > by_n[r["num_gpus"]]["tokens_per_s"]:
            by_n[r["num_gpus"]] = r
    curves = []
    for (model, gpu, rest), by_n in sorted(groups.items()):
        if len(by_n) < 2:
            continue
        counts = sorted(by_n)
        t0, n0 = by_n[counts[0]]["tokens_per_s"], counts[0]
        per_gpu0 = t0 / n0
        points, knee, reached = [], counts[0], False
        for i, n in enumerate(counts):
            rec = by_n[n]
            eff = (rec["tokens_per_s"] / n) / per_gpu0
            rec["scaling_efficiency"] = eff
            marginal = None
            if i:
                prev = counts[i - 1]
                marginal = ((rec["tokens_per_s"] - by_n[prev]["tokens_per_s"]) / (n - prev)) / per_gpu0
            if not reached:
                if marginal is not None and marginal < KNEE_MARGINAL_EFFICIENCY:
                    reached = True
                else:
                    knee = n
            points.append({"num_gpus": n, "tokens_per_s": rec["tokens_per_s"], "efficiency": eff,
                           "marginal_efficiency": marginal, "index": rec["index"]})
        if reached:  # a knee inside the range; otherwise knee_gpus is only a lower bound, no record is marked
            by_n[knee]["knee"] = True
        curves.append({"model": model, "gpu": gpu, "axes": json.loads(rest), "points": points, "knee_gpus": knee,
                       "knee_reached": reached})
    return curves


def finish(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mark the Pareto set and the knees in place; the summary across points."""
    axis = mark_pareto(records)
    curves = scaling_curves(records)
    return {"pareto_axis": axis, "pareto": [r["index"] for r in records if r["pareto"]], "curves": curves}


def short_plan(plan: dict[str, Any]) -> str:
    text = f"TP{plan['tp']} CP{plan['cp']} PP{plan['pp']} DP{plan['dp']}"
    if plan.get("ep", 1) > 1:
        text += f" EP{plan['ep']}"
    text += f" mb{plan['micro_batch_size']} {plan['schedule']}"
    if plan.get("vpp", 1) > 1:
        text += f"x{plan['vpp']}"
    text += f" Z{plan['zero_stage']}"
    if plan["recompute"] != "none":
        text += f" rc:{plan['recompute']}"
    return text


__all__ = ["make_record", "mark_pareto", "pareto_axis", "scaling_curves", "finish", "short_plan",
           "KNEE_MARGINAL_EFFICIENCY"]
