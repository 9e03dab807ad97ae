"""Evaluations and planner results as rich tables for people (``solver-cli evaluate``/``optimize``).

The pure CONTRACT mapping (``--format json``, the gRPC service) lives in :mod:`parplan.library.contract`;
its names are re-exported here for existing callers.

* :func:`render_evaluation` -> the human-readable report of one evaluated plan;
* :func:`render_result` -> the report of an ``optimize`` result (best plan, runners-up, frontier, reasons).
"""

from __future__ import annotations

from typing import Any, Optional

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from parplan.library.contract import (METRIC_KEYS, PLAN_KEYS, evaluation_status, evaluation_to_dict,  # noqa: F401
                                     metrics_to_dict, plan_entry, plan_result_to_dict, plan_to_dict,
                                     result_to_dict, to_json)
from parplan.costmodel.evaluation.ledger import BREAKDOWN_KEYS, Evaluation
from parplan.client.band_report import BandSource, band_caption, band_cells, best_band_line
from parplan.client.plan_line import ints, short_plan
from parplan.costmodel.schedules.schedule import Schedule
from parplan.costmodel.spec.spec import Plan, Spec
from parplan.frameworks.compare import in_words

BREAKDOWN_NOTES = {
    "compute": "layer and LM-head FLOPs (mean stage)",
    "recompute": "forward recomputation (mean stage)",
    "tp": "TP collectives, exposed",
    "cp": "CP ring KV exchange, exposed",
    "ep": "EP all-to-all, exposed",
    "pp": "stage-boundary send/recv, exposed",
    "dp": "DP grad/param sync, ZeRO-3 gathers, optimizer offload, exposed",
    "bubble": "pipeline fill and drain",
    "imbalance": "slowest stage minus mean stage",
}


# ------------------------------------------------------------------------------------------ tables


def _num(value: float, decimals: int) -> str:
    return f"{value:,.{decimals}f}"


def spec_summary(spec: Spec) -> str:
    m, t, c = spec.model, spec.training, spec.cluster
    from parplan.frameworks.profiles import user_overrides

    profile = spec.bound_framework.profile
    overrides = user_overrides(spec)  # the profile's memory conventions are not the user's overrides
    assumptions = (spec.assumptions.preset + (f" + {profile.name} memory conventions" if profile and profile.assumptions
                                              else "")
                   + (f" + {len(overrides)} override{'s' if len(overrides) != 1 else ''}" if overrides else ""))
    gpus = (" + ".join(f"{p.num_gpus} × {p.gpu}" for p in c.pools) if c.pools is not None and len(c.pools) > 1
            else f"{c.num_gpus} × {c.gpu}")
    return (f"{m.name} on {gpus} · {t.precision}\n"
            f"seq_len {t.seq_len} · global_batch_size {t.global_batch_size} · assumptions {assumptions}")


def plan_table(plan: Plan, runs_on: Optional[list[str]] = None) -> Table:
    table = Table(title="Plan", title_justify="left", box=box.SIMPLE_HEAD, show_header=False, pad_edge=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("tp · cp · pp · dp", f"{plan.tp} · {plan.cp} · {plan.pp} · {plan.dp}")
    table.add_row("ep · etp", f"{plan.ep} · {plan.etp}")
    table.add_row("micro_batch_size", str(plan.micro_batch_size))
    table.add_row("num_microbatches", str(plan.num_microbatches))
    table.add_row("schedule · vpp", f"{plan.schedule} · {plan.vpp}")
    table.add_row("stage_layers", ints(plan.stage_layers))
    if plan.recompute == "full":
        table.add_row("recompute", f"full · recompute_layers {ints(plan.recompute_layers)}")
    else:
        table.add_row("recompute", plan.recompute)
    table.add_row("zero_stage", str(plan.zero_stage))
    if plan.zero_replicas > 1:
        table.add_row("zero_replicas (HSDP)", f"{plan.zero_replicas} · shards of {plan.dp * plan.cp // plan.zero_replicas}")
    if plan.optimizer_states is not None:
        table.add_row("optimizer_states", plan.optimizer_states)
    if plan.optimizer_offload_fraction > 0:
        table.add_row("optimizer_offload_fraction", f"{plan.optimizer_offload_fraction:g}")
    if plan.activation_offload_layers:
        table.add_row("activation_offload_layers", f"{plan.activation_offload_layers} (activations on the host)")
    table.add_row("sequence_parallel", "yes" if plan.sequence_parallel else "no")
    if plan.cp > 1:
        table.add_row("cp_comm_type", plan.cp_comm_type)
    if plan.moe_fp8_dispatch or plan.moe_a2a_overlap:  # shown only where a plan makes these choices
        table.add_row("EP all-to-all", " · ".join(name for name, on in (("FP8 dispatch", plan.moe_fp8_dispatch),
                                                                        ("overlapped", plan.moe_a2a_overlap)) if on))
    if plan.pipeline_layout is not None:
        table.add_row("pipeline_layout", " ".join(ints(chunks) for chunks in plan.pipeline_layout))
    if runs_on is not None:
        table.add_row("runs on", ", ".join(runs_on) or "none of the profiled frameworks")
    return table


RUNS_ON_SHORT = {"megatron-core": "mc", "megatron-bridge": "mb", "torchtitan": "tt", "deepspeed": "ds",
                 "megatron-lm": "ml", "llm-foundry": "lf"}  # the last two only when a spec names them


def metrics_table(evaluation: Evaluation) -> Table:
    m = evaluation.metrics
    table = Table(title="Metrics", title_justify="left", box=box.SIMPLE_HEAD, show_header=False, pad_edge=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    table.add_column("note")
    peak_stage = max(range(len(m.stage_memory_gib)), key=m.stage_memory_gib.__getitem__) if m.stage_memory_gib else 0
    table.add_row("step time (s)", _num(m.step_time_s, 3), "")
    if m.step_order_step_s is not None:  # DualPipe / DualPipeV: the upstream step order over this plan's stages
        table.add_row("step by step order (s)", _num(m.step_order_step_s, 3),
                      f"{(m.step_order_step_s / m.step_time_s - 1) * 100:+.1f} % vs the searched closed form")
    table.add_row("MFU (%)", _num(100 * m.mfu, 2), "model FLOPs / (step · GPUs · dense peak)")
    table.add_row("HFU (%)", _num(100 * m.hfu, 2), "including recomputation")
    table.add_row("tokens/s", _num(m.tokens_per_s, 0), "whole cluster")
    table.add_row("model TFLOP/s per GPU", _num(m.model_tflops_per_gpu, 1), "")
    table.add_row("peak memory (GiB)", _num(m.peak_memory_gib, 2), f"stage {peak_stage}")
    table.add_row("usable memory (GiB)", _num(m.usable_memory_gib, 2), "per GPU")
    table.add_row("fits", Text("yes", style="green") if m.fits else Text("no", style="bold red"), "")
    return table


def breakdown_table(evaluation: Evaluation) -> Table:
    m = evaluation.metrics
    step = m.step_time_s
    table = Table(title="Step time breakdown", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  show_footer=True)
    table.add_column("component", footer="step")
    table.add_column("time (s)", justify="right", footer=_num(step, 3))
    table.add_column("share (%)", justify="right", footer=_num(100.0, 1) if step > 0 else "-")
    table.add_column("what", footer="")
    for key in BREAKDOWN_KEYS:
        seconds = m.breakdown_s.get(key, 0.0)
        share = _num(100 * seconds / step, 1) if step > 0 else "-"
        style = "dim" if seconds == 0 else ""
        table.add_row(key, _num(seconds, 3), share, BREAKDOWN_NOTES.get(key, ""), style=style)
    return table


def _headroom(evaluation: Evaluation) -> str:
    """How close each stage is to the usable memory: usable minus the stage's total, per stage (the least one
    when there are many stages)."""
    free = [evaluation.metrics.usable_memory_gib - s.memory_gib for s in evaluation.stages]
    if not free:
        return ""
    if len(free) <= 16:
        return "headroom per stage (GiB): " + ", ".join(_num(f, 1) for f in free)
    least = min(range(len(free)), key=free.__getitem__)
    return f"least headroom {_num(free[least], 1)} GiB (stage {least})"


def stage_table(evaluation: Evaluation) -> Table:
    m = evaluation.metrics
    times = [s.time_per_microbatch_s for s in evaluation.stages]
    slowest = max(range(len(times)), key=times.__getitem__) if times else -1
    table = Table(title="Per-stage ledger (per GPU)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1, 0, 0))
    for header in ("stage", "layers", "recomp", "in-flight\nµb", "t/µb\n(ms)", "states\n(GiB)",
                   "activ.\n(GiB)", "logits\n(GiB)", "work\n(GiB)", "total\n(GiB)"):
        table.add_column(header, justify="right", no_wrap=True)
    for s in evaluation.stages:
        over = s.memory_gib > m.usable_memory_gib
        ms = 1e3 * s.time_per_microbatch_s
        time_text = Text(_num(ms, 1 if ms < 100 else 0), style="bold" if s.index == slowest else "")
        total_text = Text(_num(s.memory_gib, 1), style="bold red" if over else "")
        table.add_row(str(s.index), str(s.layers), str(s.recomputed_layers), _num(s.inflight_microbatches, 2),
                      time_text, _num(s.model_states_gib, 1), _num(s.activations_gib, 1), _num(s.logits_gib, 1),
                      _num(s.workspace_gib + s.pipeline_buffers_gib + s.runtime_buffers_gib, 1), total_text)
    table.caption = (f"bold time: slowest stage (sets the pace); work: working set + pipeline buffers + NCCL/TE "
                     f"buffers; usable "
                     f"memory {_num(m.usable_memory_gib, 2)} GiB per GPU (after any search.memory_margin_gib); "
                     f"{_headroom(evaluation)}")
    table.caption_justify = "left"
    return table


# the terms outside the tensor ledger (costmodel/memory/runtime_memory.py): what each is and where it is counted
OUTSIDE_LEDGER_NOTES = {
    "cuda_context": "CUDA context + kernel images; left out of usable memory",
    "allocator_fragmentation": "caching allocator; left out of usable memory",
    "nccl_buffers": "per communicator; in each stage's total",
    "userbuffers": "TE TP-overlap buffers; in each stage's total",
    "te_workspaces": "TE cuBLAS workspaces; in each stage's total",
}


def outside_ledger_table(evaluation: Evaluation) -> Optional[Table]:
    """The memory outside the tensor ledger, line by line (None when the answer carries none)."""
    lines = evaluation.metrics.memory_outside_ledger_gib
    if not lines:
        return None
    table = Table(title="Memory outside the tensor ledger (per GPU)", title_justify="left", box=box.SIMPLE_HEAD,
                  show_header=False, pad_edge=False)
    table.add_column("term", style="bold")
    table.add_column("GiB", justify="right")
    table.add_column("where")
    for key, gib in lines.items():
        table.add_row(key.replace("_", " "), _num(gib, 2), OUTSIDE_LEDGER_NOTES.get(key, ""),
                      style="dim" if gib == 0 else "")
    return table


def render_evaluation(evaluation: Evaluation, console: Console, *, spec: Optional[Spec] = None,
                      title: Optional[str] = None) -> None:
    """Print the plan, metrics, breakdown, per-stage ledger and violations of one evaluation."""
    if title:
        console.print(Text(title, style="bold"))
    if spec is not None:
        console.print(Text(spec_summary(spec), style="bold"))
    status = evaluation_status(evaluation)
    console.print(Text.assemble("status: ", (status, "bold green" if evaluation.feasible else "bold red")))
    console.print(plan_table(evaluation.plan, evaluation.runs_on))
    console.print(metrics_table(evaluation))
    console.print(breakdown_table(evaluation))
    console.print(stage_table(evaluation))
    outside = outside_ledger_table(evaluation)
    if outside is not None:
        console.print(outside)
    if evaluation.violations:
        console.print(Text(f"Violations ({len(evaluation.violations)})", style="bold red"))
        for v in evaluation.violations:
            console.print(Text(f"  - {v}", style="red"))


# ------------------------------------------------------------------------------------------ optimize


def gpus_per_pool(plan: Plan, pools: int) -> list[int]:
    """GPUs each of ``pools`` pools gives a plan with ``stage_pools``: tp·cp·dp per stage placed on it."""
    used = [0] * pools
    for k in plan.stage_pools or []:
        used[k] += plan.num_gpus // plan.pp
    return used


def ranking_table(evaluations: list[Evaluation], title: str, best: Optional[Evaluation] = None,
                  chosen: Optional[Plan] = None, pools: int = 1, source: Optional[BandSource] = None) -> Table:
    """One row per plan: step time, the difference to the best, MFU, memory, on several ``pools`` the GPUs of
    each pool (``H+A`` for two), and the plan; the row whose plan is ``chosen`` is marked ``*``. With a band
    ``source``, each plan's step-time and peak-memory bands, ``tie`` where its step band overlaps the best's."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    banded = (("band (s)", "left"), ("band GiB", "right")) if source is not None else ()
    headers = (("#", "right"), ("step (s)", "right"), *banded[:1], ("vs best", "right"), ("MFU", "right"),
               ("tokens/s", "right"), ("peak GiB", "right"), *banded[1:],
               *((("GPUs per pool", "right"),) if pools > 1 else ()), ("runs on", "left"), ("plan", "left"))
    for header, justify in headers:
        table.add_column(header, justify=justify, no_wrap=header != "plan")
    ref = best or (evaluations[0] if evaluations else None)
    for i, e in enumerate(evaluations, 1):
        m = e.metrics
        delta = "" if ref is None or e is ref else f"{(m.step_time_s / ref.metrics.step_time_s - 1) * 100:+.1f}%"
        per_pool = ("+".join(map(str, gpus_per_pool(e.plan, pools))),) if pools > 1 else ()
        cells = band_cells(e, source, ref)
        table.add_row(f"{i}*" if chosen is not None and e.plan == chosen else str(i), f"{m.step_time_s:.3f}",
                      *cells[:1], delta, f"{m.mfu * 100:.1f}%", f"{m.tokens_per_s:,.0f}", f"{m.peak_memory_gib:.1f}",
                      *cells[1:], *per_pool, " ".join(RUNS_ON_SHORT[f] for f in e.runs_on) or "-", short_plan(e.plan))
    caption = "runs on: mc megatron-core, mb megatron-bridge, tt torchtitan, ds deepspeed"
    if source is not None:
        caption = band_caption(source) + "\n" + caption
    for name in ("megatron-lm", "llm-foundry"):
        if any(name in e.runs_on for e in evaluations):
            caption += f", {RUNS_ON_SHORT[name]} {name}"
    table.caption = caption
    return table


def why_it_wins(best: Evaluation, other: Evaluation) -> str:
    """The breakdown terms that differ most between the best plan and a runner-up, in words."""
    a, b = best.metrics.breakdown_s, other.metrics.breakdown_s
    diffs = sorted(((b[k] - a[k], k) for k in a), reverse=True)
    parts = [f"{k} {d:+.2f} s" for d, k in diffs if abs(d) >= 0.005 * best.metrics.step_time_s][:3]
    return ", ".join(parts) if parts else "same breakdown within 0.5 %"


def framework_line(entry) -> str:
    """One framework's best beside the result's: ``torchtitan: -1.2 %, DualPipeV TP8 ...`` (frameworks/compare.py)."""
    if entry.best is None:
        return f"{entry.framework}: {entry.status}" + (f" ({entry.reason})" if entry.reason else "")
    p, m = entry.best.plan, entry.best.metrics
    vs = "" if entry.vs_best is None else f"{entry.vs_best * 100:+.1f} %, "
    unproven = "" if entry.status == "OPTIMAL" else f"{entry.status}, the best found in the time it had: "
    line = (f"{entry.framework}: {unproven}{vs}{SCHEDULE_NAMES[p.schedule] if p.pp > 1 else 'no PP'}, "
            f"{m.step_time_s:.3f} s ({short_plan(p)})")
    differs = getattr(entry, "differs", ())
    return line + (f"; differs in {', '.join(in_words(d) for d in differs)}" if differs else "; same plan and conventions")


SCHEDULE_NAMES = {Schedule.ONE_F_ONE_B: "1F1B", Schedule.INTERLEAVED: "interleaved 1F1B", Schedule.ZB_H1: "ZB-H1",
                  Schedule.DUALPIPE: "DualPipe", Schedule.DUALPIPEV: "DualPipeV"}


def margin_line(margin_gib: float, spec: Any) -> str:
    """The answer's memory margin and where it comes from: the user's (``search.memory_margin_gib``,
    ``--memory-margin``) or the memory band's (``search.memory_band``, costmodel/evaluation/prediction_band.py)."""
    line = f"memory margin: {margin_gib:g} GiB per GPU kept free"
    if spec is None or not spec.search.memory_band or spec.search.memory_margin_gib > 0:
        return line
    from parplan.costmodel.evaluation.prediction_band import band_source

    source = band_source(spec)
    return (f"{line} (the memory band: measured peaks up to {1 / source.peak_memory_ratio[0]:.3f} x predicted over "
            f"{source.memory_rows} runs; --memory-margin or search.memory_band: false to change)")


def render_result(result, console: Console, *, spec: Optional[Spec] = None, per_framework=None) -> None:
    """``solver-cli optimize`` for people: status, the best plan with its ledger, runners-up, frontier, reasons."""
    if spec is not None:
        console.print(Text(spec_summary(spec), style="bold"))
    st = result.stats
    ok = result.status in ("OPTIMAL", "FEASIBLE")
    line = Text.assemble("status: ", (result.status, "bold green" if ok else "bold red"),
                         f"  objective: {result.objective}  method: {st.method}  ",
                         f"{st.choices_total} legal choices, {st.choices_searched} searched after bounds")
    if result.timing is not None:  # no clock readings in deterministic mode
        line.append(f", {result.timing.wall_time_s:.2f} s")
    if st.gap is not None and result.status != "OPTIMAL":
        line.append(f"  gap {st.gap * 100:.2f} %")
    console.print(line)
    if getattr(result, "completed", None) is not None:  # a partial plan: what the planner chose
        console.print(Text(f"completed (chosen by the planner): {', '.join(result.completed) or 'nothing'}"))
    if getattr(result, "memory_margin_gib", None) is not None:
        console.print(Text(margin_line(result.memory_margin_gib, spec)))
    if result.plans:
        best = result.plans[0]
        console.print(Text("Best plan", style="bold"))
        console.print(plan_table(best.plan, best.runs_on))
        console.print(metrics_table(best))
        console.print(breakdown_table(best))
        console.print(stage_table(best))
        if getattr(result, "placement", None):  # several cluster.pools (solver/pools/explain.py)
            console.print(Text("Why each stage sits on its pool", style="bold"))
            for line in result.placement:
                console.print(Text(f"  {line}"))
        if per_framework:
            mine = getattr(spec, "framework", None) if spec is not None else None
            name = mine if isinstance(mine, str) or mine is None else mine.name
            console.print(Text(f"Best on each other framework (vs the best plan{f', {name}' if name else ''}; "
                               "one solve each)", style="bold"))
            for entry in per_framework:
                console.print(Text(f"  {framework_line(entry)}"))
        source = getattr(result, "band_source", None)
        if source is not None:
            console.print(Text(best_band_line(best, source)))
        if len(result.plans) > 1:
            console.print(ranking_table(result.plans, f"Top {len(result.plans)} (distinct choices, best first)",
                                        source=source))
            for i, e in enumerate(result.plans[1:], 2):
                console.print(Text(f"  #{i} loses on: {why_it_wins(best, e)}", style="dim"))
    if result.pareto:
        console.print(_pareto_table(result, spec))
    if result.explanation is not None:
        _render_explanation(result.explanation, console)


def _pareto_table(result, spec: Optional[Spec]) -> Table:
    """The Pareto frontier's table, the chosen plan starred (or a caption saying why it is not on it)."""
    pools = len(spec.cluster.pools) if spec is not None and spec.cluster.pools else 1
    axis = ("peak memory per GPU" if result.pareto_axis == "memory" else "GPUs per pool" if pools > 1
            else "GPU count")
    chosen = result.plans[0].plan if result.plans else None
    table = ranking_table(result.pareto, f"Pareto frontier: step time vs {axis} ({len(result.pareto)} points)",
                          chosen=chosen, pools=pools)
    if chosen is not None:
        best = result.plans[0].metrics
        dominating = [i for i, e in enumerate(result.pareto, 1) if e.plan != chosen
                      and e.metrics.step_time_s <= best.step_time_s and e.metrics.peak_memory_gib <= best.peak_memory_gib]
        if any(e.plan == chosen for e in result.pareto):
            table.caption = "* the chosen plan"
        elif dominating:
            table.caption = (f"the chosen plan is not on this frontier: #{dominating[0]} matches its step time "
                             f"with less memory")
        else:
            table.caption = "the chosen plan is not on this frontier"
        table.caption_justify = "left"
    return table


def _render_explanation(ex, console: Console) -> None:
    """Why nothing fits: the summary, the conflicting requirements, and what would fit."""
    console.print(Text("Why nothing fits", style="bold red"))
    console.print(Text(f"  {ex.summary}"))
    if ex.conflicting:
        console.print(Text("  conflicting requirements: " + ", ".join(ex.conflicting)))
    if ex.relaxations:
        console.print(Text("What would fit", style="bold"))
        for r in ex.relaxations:
            tail = f"  -> {short_plan(r.plan.plan)}, {r.plan.metrics.step_time_s:.2f} s" if r.plan else ""
            console.print(Text(f"  - {r.requirement}: {r.change}{tail}"))


__all__ = ["plan_result_to_dict", "render_result", "framework_line", "ranking_table", "why_it_wins", "plan_to_dict", "metrics_to_dict", "plan_entry", "result_to_dict", "evaluation_to_dict",
           "evaluation_status", "to_json", "render_evaluation", "spec_summary", "plan_table", "metrics_table",
           "breakdown_table", "stage_table", "PLAN_KEYS", "METRIC_KEYS"]
