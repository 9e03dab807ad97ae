"""``solver-cli replan`` (issue 43): the running job's spec and plan, the cluster change and the expected time to
the next change in; the best plan under the replan objective (docs/replan.md) out. Registered on the app by
client/cli.py; imports only typer at module level (start-up time, issue 41 item 2)."""

from __future__ import annotations

from typing import Optional

import typer

from parplan.client.cli_errors import one_line_errors
from parplan.client.cli_options import ImportSource, ResultFormat
from parplan.client.cli_spec import read_spec

OPTION_OF_FIELD = {"lost_nodes": "--lost-node", "added_nodes": "--add-nodes", "horizon_s": "--horizon",
                   "time_limit_s": "--time-limit", "workers": "--workers"}


def _option_error(err):
    """An ArgumentError naming the library argument, reworded with its option (``lost_nodes[0]`` -> --lost-node)."""
    from parplan.costmodel.errors import ArgumentError

    head = (err.argument or "").split("[", 1)[0]
    if isinstance(err, ArgumentError) and head in OPTION_OF_FIELD:
        return ArgumentError(OPTION_OF_FIELD[head], err.rule, err.value)
    return err


def replan_command(
    spec_path: str = typer.Argument(..., metavar="SPEC.yaml", help="the running job's spec (its cluster before the "
                                    "change), with plan: unless --plan or --export-file gives the plan"),
    plan_path: Optional[str] = typer.Option(None, "--plan", metavar="PLAN.json", help="solver-cli --format json "
                                            "output (plans[0]), a plan entry or a plan object"),
    export_file: Optional[str] = typer.Option(None, "--export-file", metavar="FILE", help="the running job's "
                                              "framework file instead (Megatron-LM args, torchtitan TOML, DeepSpeed)"),
    source: Optional[ImportSource] = typer.Option(None, "--from", case_sensitive=False, help="the export's framework"),
    lost: list[int] = typer.Option([], "--lost-node", metavar="INDEX", help="a node lost (0-based; repeat)"),
    added: int = typer.Option(0, "--add-nodes", help="nodes added"),
    horizon: float = typer.Option(..., "--horizon", metavar="SECONDS", help="expected time to the next change"),
    restart: Optional[float] = typer.Option(None, "--restart-s", help="restart time (default 600 s, an assumption)"),
    storage: Optional[float] = typer.Option(None, "--storage-gbps-per-node", help="checkpoint read GB/s per node "
                                            "(default 0.98: Llama 3's 2 TB/s over 2,048 nodes)"),
    time_limit: float = typer.Option(10.0, "--time-limit", help="seconds for the whole call"),
    workers: int = typer.Option(0, "--workers", help="CP-SAT workers (0: all cores)"),
    output_format: ResultFormat = typer.Option("table", "--format", case_sensitive=False),
) -> None:
    """Replan a running job after nodes are lost or added: the plan of least step time plus amortised resharding."""
    with one_line_errors():
        from parplan.client.export_cli import read_plan_file
        from parplan.costmodel.errors import ParplanError
        from parplan.library.replan import replan

        spec = read_spec(spec_path)
        plan = read_plan_file(plan_path, spec) if plan_path else None
        export = None
        if export_file is not None:
            with open(export_file, encoding="utf-8") as f:
                export = f.read()
        reshard = {k: v for k, v in (("restart_s", restart), ("storage_read_gbps_per_node", storage)) if v is not None}
        try:
            result = replan(spec, plan=plan, export=export, export_target=source and source.value, lost_nodes=lost,
                            added_nodes=added, horizon_s=horizon, reshard=reshard, time_limit_s=time_limit,
                            workers=workers)
        except ParplanError as err:
            raise _option_error(err) from None
        typer.echo(render(result, output_format.value), nl=False)


def render(result, fmt: str) -> str:
    from parplan.library.contract import to_json
    from parplan.library.replan import replan_result_to_dict

    if fmt == "json":
        return to_json(replan_result_to_dict(result)) + "\n"
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(replan_result_to_dict(result), sort_keys=False)
    s = result.stats
    lines = [f"status {result.status}  horizon {result.horizon_s:g} s  effective step "
             f"{s.objective_value if s.objective_value is not None else float('nan'):.3f} s  bound "
             f"{s.best_bound if s.best_bound is not None else float('nan'):.3f} s  gap {s.gap or 0:.2%}"]
    for name, p in (("best", result.best), ("fastest", result.fastest), ("keep TP/PP", result.keep)):
        if p is None:
            continue
        e = p.evaluation.plan
        lines.append(f"{name:>10}: tp {e.tp} cp {e.cp} pp {e.pp} dp {e.dp} ep {e.ep} zero {e.zero_stage} "
                     f"mbs {e.micro_batch_size}  step {p.step_time_s:.3f} s  reconfig {p.reconfiguration_s:.0f} s "
                     f"({p.resharded_bytes / 1e9:.0f} GB from storage)  effective {p.effective_step_time_s:.3f} s")
    if result.keep is None and result.keep_reason:
        lines.append(f"keep TP/PP: not possible: {result.keep_reason}")
    lines.append("frontier (step s, reconfig s): " + ", ".join(
        f"({p.step_time_s:.3f}, {p.reconfiguration_s:.0f})" for p in result.frontier))
    return "\n".join(lines) + "\n"
