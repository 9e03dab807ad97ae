"""The bodies of ``solver-cli export / import / schema / presets`` and of the ``--export``, ``--emit``,
``--plot`` and progress options of ``optimize`` (client/cli.py registers them).

Output convention for exports: without ``--out DIR`` the file text goes to stdout (so
``solver-cli optimize spec.yaml --export megatron > args.sh`` works) and replaces the report; with
``--out DIR`` the file is written there under its own name and the usual report is printed. Warnings
(what the target cannot express) always go to stderr, one ``warning:`` line each.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Optional

import typer
import yaml

from parplan.library.contract import plan_fields
from parplan.library.evaluation import evaluate_spec
from parplan.library.presets import load_presets, presets_lines  # noqa: F401  (presets_lines re-exported)
from parplan.library.spec_io import SpecError, one_line, validation_error_message
from parplan.costmodel.evaluation.evaluate import PlanError
from parplan.costmodel.evaluation.ledger import Evaluation
from parplan.costmodel.spec.spec import Plan, PlanSpec, Spec
from parplan.frameworks.export import TARGETS, export_plan
from parplan.frameworks.export_common import Export
from parplan.frameworks.import_plan import spec_from_export
from parplan.frameworks.jobs import LAUNCHERS, emit_job
from parplan.client.solve_progress import SolveProgress  # noqa: F401  (re-exported)

MAX_PLAN_BYTES = 16 * 2**20


def nothing_to_export(result) -> str:
    """The stderr text of ``optimize --export/--emit`` when no plan came back: status and why."""
    lines = [f"nothing to export: status {result.status}"]
    ex = result.explanation
    if ex is not None:
        lines.append(f"  {ex.summary}")
        if ex.conflicting:
            lines.append("  conflicting requirements: " + ", ".join(ex.conflicting))
        lines += [f"  would fit: {r.requirement}: {r.change}" for r in ex.relaxations]
    return "\n".join(lines)


def warn(message: str) -> None:
    typer.echo(f"warning: {one_line(message)}", err=True)


# ------------------------------------------------------------------------------------------ exports


def build_export(spec: Spec, plan: Plan, target: Optional[str], launcher: Optional[str]) -> Export:
    """The framework export of ``plan`` (default target megatron when only a launcher is asked for),
    wrapped in the job file for ``launcher`` if given."""
    export = export_plan(spec, plan, target or "megatron")
    return emit_job(spec, plan, export, launcher) if launcher else export


def deliver(export: Export, out_dir: Optional[str]) -> None:
    """Print the export to stdout, or write it into ``out_dir``; warnings to stderr."""
    for w in export.warnings:
        warn(w)
    if out_dir is None:
        sys.stdout.write(export.text)
        return
    try:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, export.filename)
        with open(path, "w", encoding="utf-8") as f:
            f.write(export.text)
    except OSError as err:
        raise SpecError(f"--out: cannot write {out_dir}: {err.strerror or err}") from None
    typer.echo(f"wrote {path}", err=True)


def _plan_object(data: Any, index: int, name: str) -> dict:
    """The plan mapping inside a CONTRACT result (``plans[index].plan``), a plan entry, or a bare plan."""
    if isinstance(data, dict) and isinstance(data.get("plans"), list):
        plans = data["plans"]
        if not plans:
            raise SpecError(f"{name}: 'plans' is empty (status {data.get('status')!r}); nothing to export")
        if not 0 <= index < len(plans):
            raise SpecError(f"--index: {index} is out of range; {name} has {len(plans)} plans")
        data = plans[index]
    if isinstance(data, dict) and isinstance(data.get("plan"), dict):
        data = data["plan"]
    if not isinstance(data, dict):
        raise SpecError(f"{name}: expected a solver-cli JSON result, a plan entry or a plan object")
    return data


def read_plan_file(path: str, spec: Spec, index: int = 0) -> Plan:
    """A plan from ``solver-cli optimize/evaluate --format json`` output (``plans[index]``), one entry of
    its ``plans``, or a bare plan object (omitted keys take the plan defaults), resolved against ``spec``."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PLAN_BYTES + 1)
    except OSError as err:
        raise SpecError(f"{path}: cannot read: {err.strerror or err}") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise SpecError(f"{path}: larger than 16 MiB; not a plan file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecError(f"{path}: not JSON: {err}") from None
    obj = _plan_object(data, index, path)
    try:
        plan_spec = PlanSpec.model_validate(plan_fields(obj))
    except Exception as err:  # pydantic ValidationError
        message = validation_error_message(err, prefix=("plan",)) if hasattr(err, "errors") else str(err)
        raise PlanError(message) from None
    return evaluate_spec(spec, plan_spec).plan


def plan_of_spec(spec: Spec) -> Plan:
    if spec.plan is None:
        raise SpecError("spec: has no 'plan:' section; give a plan file with --spec, or add plan: to the spec")
    return evaluate_spec(spec).plan


def import_to_yaml(path: str, source: str, base: Spec) -> str:
    """The spec YAML that ``solver-cli import`` prints: ``base`` with the file's plan and stated fields."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_PLAN_BYTES)
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    spec = spec_from_export(text, source, base)
    evaluate_spec(spec)  # the plan must have a shape the cost model takes
    data = spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    return f"# spec re-read from {os.path.basename(path)} ({source}) by solver-cli import\n" + \
        yaml.safe_dump(data, sort_keys=False)


# ------------------------------------------------------------------------------------ schema/presets


def spec_json_schema() -> dict:
    """``Spec.model_json_schema()`` with ``model`` also accepting ``{hf_config: path}`` / ``{preset: name}``
    (expanded before validation, library/huggingface.py)."""
    schema = Spec.model_json_schema()
    original = schema["properties"]["model"]
    schema["properties"]["model"] = {"anyOf": [
        original,
        {"type": "object", "title": "HFConfigModel", "required": ["hf_config"],
         "properties": {"hf_config": {"type": "string", "description": "path to a Hugging Face config.json"}},
         "additionalProperties": True, "description": "model read from a config.json; other keys override it"},
        {"type": "object", "title": "PresetModel", "required": ["preset"],
         "properties": {"preset": {"enum": sorted(load_presets()), "description": "solver-cli presets"}},
         "additionalProperties": True, "description": "a named architecture; other keys override it"},
    ]}
    return schema


# ------------------------------------------------------------------------------------------- plot


def check_plot(spec: Spec) -> None:
    """``--plot`` draws step time against one axis: refused on several ``cluster.pools`` (one GPU axis each);
    then the ``plot`` extra is required."""
    from parplan.client.cli_errors import require_extra

    if spec.cluster.pools is not None and len(spec.cluster.pools) > 1:
        raise SpecError("--plot: the frontier on several cluster.pools has one GPU axis per pool and is not drawn "
                        "(the table and --format json list its points)")
    require_extra("plot", "--plot")


def _label_points(ax, xs: list[float], ys: list[float], points: list[Evaluation], log_y: bool) -> None:
    """Label the frontier's points that have room (a readable subset, not all): a point is labelled when no
    labelled one lies within 16 % of the x range and 6 % of the y range (log y: of its log range)."""
    placed: list[tuple[float, float]] = []

    def norm(x: float, y: float) -> tuple[float, float]:
        fy = (math.log(y) - math.log(min(ys))) / (math.log(max(ys) / min(ys)) or 1) if log_y else \
            (y - min(ys)) / ((max(ys) - min(ys)) or 1)
        return (x - min(xs)) / ((max(xs) - min(xs)) or 1), fy

    for x, y, p in zip(xs, ys, points):
        nx, ny = norm(x, y)
        if all(abs(nx - px) > 0.16 or abs(ny - py) > 0.06 for px, py in placed):
            placed.append((nx, ny))
            ax.annotate(f"TP{p.plan.tp} CP{p.plan.cp} PP{p.plan.pp} DP{p.plan.dp}"
                        + (f" EP{p.plan.ep}" if p.plan.ep > 1 else "") + f" {p.plan.schedule}",
                        (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7, color="#204a87")


def plot_frontier(result, path: str, spec: Spec) -> None:
    """A labelled PNG of the Pareto frontier; the chosen (best) plan is starred. matplotlib is the
    optional ``plot`` extra (``pip install 'parplan[plot]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        raise SpecError("--plot needs matplotlib, the optional 'plot' extra: pip install 'parplan[plot]' "
                        "(matplotlib==3.10.7)") from None
    from parplan.client.plan_line import short_plan

    points: list[Evaluation] = list(result.pareto)
    if not points:
        raise SpecError("--plot: no frontier to draw (use --pareto memory|gpus on a spec where a plan fits)")
    by_gpus = result.pareto_axis == "gpus"
    xs = [p.plan.num_gpus if by_gpus else p.metrics.peak_memory_gib for p in points]
    ys = [p.metrics.step_time_s for p in points]
    fig, ax = plt.subplots(figsize=(10, 6), dpi=120)
    ax.plot(xs, ys, "-o", color="#3465a4", markersize=4, zorder=2, label=f"Pareto frontier ({len(points)} plans)")
    log_y = max(ys) > 5 * min(ys)
    _label_points(ax, xs, ys, points, log_y)
    if result.plans:
        best = result.plans[0]
        bx = best.plan.num_gpus if by_gpus else best.metrics.peak_memory_gib
        ax.plot([bx], [best.metrics.step_time_s], marker="*", markersize=16, color="#cc0000", linestyle="none",
                zorder=3, label=f"chosen: {short_plan(best.plan)} ({best.metrics.step_time_s:.2f} s)")
    if log_y:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("GPUs" if by_gpus else "peak memory per GPU (GiB)")
    ax.set_ylabel("step time (s)")
    ax.set_title(f"{spec.model.name}: step time vs {'GPU count' if by_gpus else 'peak memory per GPU'}\n"
                 f"{spec.cluster.num_gpus} x {spec.cluster.gpu}, seq {spec.training.seq_len}, global batch "
                 f"{spec.training.global_batch_size}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as err:
        raise SpecError(f"--plot: cannot write {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    typer.echo(f"wrote {path}", err=True)


__all__ = ["build_export", "deliver", "read_plan_file", "plan_of_spec", "import_to_yaml", "spec_json_schema",
           "presets_lines", "plot_frontier", "SolveProgress", "warn", "TARGETS", "LAUNCHERS"]
