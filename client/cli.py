"""``solver-cli``: optimize a spec, evaluate its plan, validate specs, list the assumption knobs and GPUs.

Exit codes: 0 success; 2 bad input (unreadable or invalid spec, a plan that contradicts the spec, an
option out of its range, or a usage error) with ONE line ``error: <field>: <rule>`` on stderr; 1 an
internal error (a bug: also one line, no traceback) or, with ``--server``, a server that failed
the call (unreachable, busy, unauthenticated). Every :class:`~parplan.costmodel.errors.ParplanError`
is bad input; no input that validates may reach exit 1.

Warnings about a spec (settings it accepts but ignores, ``costmodel.spec.spec.spec_warnings``) go to stderr
as ``warning: ...`` lines once the command has succeeded, so ``--format json`` output stays parseable.

Cold start (issue 41 item 2): this module imports only typer and the light CLI modules; each command imports the
spec models, NumPy, OR-Tools or grpcio it uses inside its body, so ``--help``, ``presets`` and ``gpus`` load
none of them and ``validate`` only the spec models (benchmarks/cli_startup.py, tests/client/test_cli_startup.py).
"""

from __future__ import annotations

import sys
import time
from enum import Enum
from typing import TYPE_CHECKING, Any, Optional

import typer

from parplan.client.cli_errors import (EXIT_BAD_INPUT, EXIT_INTERNAL, CliCommands, exit_on_closed_stdout, fail,
                                       one_line_errors, require_extra)
from parplan.client.cli_options import (EMIT_OPTION, EXPORT_OPTION, FORMAT_OPTION, HF_CONFIG_OPTION,
                                        MEMORY_MARGIN_OPTION, OUT_OPTION, PROFILE_OPTION, RANK_BY_OPTION, SPEC_ARGUMENT,
                                        VERSION_OPTION, ExportTarget, ImportSource, Launcher, Method, OutputFormat,
                                        ParetoAxis, ResultFormat)
from parplan.client.calibrate_cli import register as register_calibrate
from parplan.client.cli_spec import print_spec_warnings, read_spec, with_memory_margin, with_rank_by
from parplan.client.replan_cli import replan_command
from parplan.client.serve_cli import serve_command
from parplan.client.sweep_cli import sweep
from parplan.client.ui_cli import ui_command
from parplan.library.messages import one_line
from parplan.costmodel.errors import ArgumentError

if TYPE_CHECKING:  # the heavy modules are imported lazily, inside the commands that use them (start-up time)
    from rich.console import Console

    from parplan.costmodel.spec.spec import Spec

app = typer.Typer(
    cls=CliCommands,
    name="solver-cli",
    help="Plan and evaluate parallelism (TP/CP/PP/DP/EP, schedules, recompute, ZeRO) for LLM training.",
    add_completion=True,  # --install-completion / --show-completion [bash|zsh|fish|powershell] (typer, shellingham)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
register_calibrate(app)  # `solver-cli calibrate` (client/calibrate_cli.py)


@app.callback()
def _options(version: bool = VERSION_OPTION) -> None:
    """Plan and evaluate parallelism (TP/CP/PP/DP/EP, schedules, recompute, ZeRO) for LLM training."""


def _stdout_console() -> Console:
    from rich.console import Console  # lazy: start-up time (issue 41 item 2)

    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


@app.command()
def evaluate(spec_path: str = SPEC_ARGUMENT, output_format: OutputFormat = FORMAT_OPTION,
             export: ExportTarget = EXPORT_OPTION, emit: Launcher = EMIT_OPTION, out: str = OUT_OPTION,
             hf_config: str = HF_CONFIG_OPTION, memory_margin: float = MEMORY_MARGIN_OPTION, profile: str = PROFILE_OPTION,
             complete: bool = typer.Option(False, "--complete", help="choose the fields `plan:` leaves unset "
                                           "(the best completion, then its ledger) instead of their defaults"),
             time_limit: float = typer.Option(60.0, "--time-limit", help="with --complete: the search's limit, s"),
             workers: int = typer.Option(0, "--workers", help="with --complete: CP-SAT workers (0: all cores)"),
             deterministic: bool = typer.Option(False, "--deterministic", help="with --complete: one worker, fixed "
                                                "seed: byte-identical answers")) -> None:
    """Evaluate the spec's fixed `plan:` (omitted keys take defaults, or with --complete the best values)."""
    with one_line_errors():
        from parplan.client import export_cli
        from parplan.client.report import evaluation_to_dict, render_evaluation, to_json
        from parplan.costmodel.evaluation.prediction_band import with_memory_band
        from parplan.library.spec_io import SpecError

        spec = with_memory_band(with_memory_margin(read_spec(spec_path, hf_config, profile), memory_margin))
        completed = None
        if complete:
            from parplan.solver.arguments import check_optimize_arguments
            from parplan.solver.cpsat import SolverControls
            from parplan.solver.planner import optimize as run_optimize

            check_optimize_arguments(top_k=1, method="cpsat", pareto=None, time_limit_s=time_limit, workers=workers,
                                     seed=1, deterministic=deterministic)
            if spec.plan is None:
                raise SpecError("plan: evaluate --complete needs a plan: section (plan: {} completes every field)")
            result = run_optimize(spec, controls=SolverControls(time_limit_s=time_limit, workers=workers,
                                                                deterministic=deterministic))
            if not result.plans:
                from parplan.client.report import plan_result_to_dict, render_result

                if output_format == OutputFormat.json:
                    typer.echo(to_json(plan_result_to_dict(result)))
                else:
                    render_result(result, _stdout_console(), spec=spec)
                print_spec_warnings(spec)
                return
            evaluation, completed = result.plans[0], result.completed
        else:
            from parplan.library.evaluation import evaluate_spec

            evaluation = evaluate_spec(spec)
        if export or emit:
            export_cli.deliver(export_cli.build_export(spec, evaluation.plan, export and export.value,
                                                       emit and emit.value), out)
            if out is None:
                return
        headroom = spec.search.memory_margin_gib > 0
        if output_format == OutputFormat.json:
            from parplan.costmodel.evaluation.prediction_band import band_source

            typer.echo(to_json(evaluation_to_dict(evaluation, headroom=headroom, completed=completed,
                                                  source=band_source(spec))))
        else:
            render_evaluation(evaluation, _stdout_console(), spec=spec)
            if completed is not None:
                typer.echo(f"completed (chosen by the planner): {', '.join(completed) or 'nothing'}")
        print_spec_warnings(spec)


@app.command()
def optimize(
    spec_path: str = SPEC_ARGUMENT,
    top: int = typer.Option(1, "--top", "-k", help="return the K best distinct choices (1-100)"),
    pareto: ParetoAxis = typer.Option(None, "--pareto", help="also the exact Pareto frontier of step time vs "
                                      "peak memory or vs GPU count", case_sensitive=False),
    output_format: ResultFormat = typer.Option(ResultFormat.table, "--format", "-f", case_sensitive=False,
                                               help="table (for people), json (docs/spec.md) or yaml"),
    time_limit: float = typer.Option(60.0, "--time-limit", help="the whole call's limit, seconds (0 < t ≤ 86400)"),
    method: Method = typer.Option(Method.cpsat, "--method", case_sensitive=False,
                                  help="cpsat, or exhaustive (the oracle; fine for small spaces)"),
    workers: int = typer.Option(0, "--workers", help="CP-SAT workers (0: all cores; at most 256)"),
    deterministic: bool = typer.Option(False, "--deterministic", help="one worker, fixed seed, deterministic "
                                       "time limit: byte-identical answers"),
    seed: int = typer.Option(1, "--seed", help="CP-SAT random seed (0 to 2**31-1)"),
    memory_budget_mib: int = typer.Option(None, "--memory-budget-mib", help="resident memory the solve may grow "
                                          "to, MiB (256 to 4194304; default 1536): what does not fit is solved "
                                          "another way or left unsolved (FEASIBLE/UNKNOWN), never an OOM"),
    export: ExportTarget = EXPORT_OPTION,
    emit: Launcher = EMIT_OPTION,
    out: str = OUT_OPTION,
    hf_config: str = HF_CONFIG_OPTION,
    memory_margin: float = MEMORY_MARGIN_OPTION, profile: str = PROFILE_OPTION, rank_by: str = RANK_BY_OPTION,
    plot: str = typer.Option(None, "--plot", metavar="FILE.png", help="with --pareto: draw the frontier "
                             "(needs the optional 'plot' extra, matplotlib)"),
    progress: bool = typer.Option(None, "--progress/--no-progress", help="live status line on stderr "
                                  "(default: only when stderr is a terminal)"),
    server: str = typer.Option(None, "--server", metavar="HOST:PORT", help="solve on a `solver-cli serve` "
                               "server (token: $PARPLAN_AUTH_TOKEN, TLS roots: $PARPLAN_TLS_CA_FILE)"),
    per_framework: bool = typer.Option(True, "--per-framework/--no-per-framework", help="also the best plan on "
                                       "each other profiled framework and 'any' (a solve each, in the time left)"),
) -> None:
    """Find the best plan(s) for the spec's objective; why it wins; the runners-up; why nothing fits."""
    with one_line_errors():
        if plot or export or emit:  # the export, import and plot machinery: only when asked for
            from parplan.client import export_cli

        axis = pareto.value if pareto else None
        budget_kw = _check_optimize_options(top, method.value, axis, time_limit, workers, seed, deterministic,
                                            memory_budget_mib, server, plot)
        spec = with_rank_by(with_memory_margin(read_spec(spec_path, hf_config, profile), memory_margin), rank_by)
        if plot:  # after the spec: a frontier on several pools is not drawn, then the extra
            export_cli.check_plot(spec)
        solver = dict(method=method.value, time_limit_s=time_limit, workers=workers, deterministic=deterministic, seed=seed)
        deadline = time.monotonic() + time_limit  # the whole call's: the search and the per-framework solves
        result, others = _solve(spec, server, top, axis, solver, budget_kw, progress, per_framework, deadline)
        if plot:
            export_cli.plot_frontier(result, plot, spec)
        if (export or emit) and _deliver_export(spec, result, export, emit, out):
            return
        _print_result(result, spec, others, output_format)
        print_spec_warnings(spec, axis)


def _deliver_export(spec: Spec, result: Any, export: Optional[Enum], emit: Optional[Enum], out: Optional[str]) -> bool:
    """``optimize --export/--emit``: the best plan's export (on stdout, or in ``out`` with its path printed);
    True when stdout holds it (the report is not printed). Never the human report in place of the export
    (``--export megatron > a.sh``): without a plan, one ``error:`` line on stderr, exit 2."""
    from parplan.client import export_cli

    if not result.plans:
        typer.echo("error: " + export_cli.nothing_to_export(result), err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    export_cli.deliver(export_cli.build_export(spec, result.plans[0].plan, export and export.value,
                                               emit and emit.value), out)
    return out is None


def _check_optimize_options(top: int, method: str, pareto: Optional[str], time_limit: float, workers: int, seed: int,
                            deterministic: bool, memory_budget_mib: Optional[int], server: Optional[str],
                            plot: Optional[str]) -> dict[str, int]:
    """``optimize``'s options range-checked as ``optimize()`` checks them, and the extras they need; returns the
    memory budget's keyword (empty: the default)."""
    from parplan.solver.arguments import check_optimize_arguments

    budget_kw = {} if memory_budget_mib is None else {"memory_budget_mib": memory_budget_mib}
    check_optimize_arguments(top_k=top, method=method, pareto=pareto, time_limit_s=time_limit, workers=workers,
                             seed=seed, deterministic=deterministic, **budget_kw)
    if server is not None and budget_kw:
        raise ArgumentError("memory_budget_mib", "is the server's own setting, not a request's (--server)",
                            memory_budget_mib)
    if plot and not pareto:
        from parplan.library.spec_io import SpecError

        raise SpecError("--plot: needs --pareto memory or --pareto gpus (the frontier to draw)")
    if server is not None:
        require_extra("server", "--server")
    return budget_kw


def _solve(spec: Spec, server: Optional[str], top: int, pareto: Optional[str], solver: dict[str, Any],
           budget_kw: dict[str, int], progress: Optional[bool], per_framework: bool,
           deadline: float) -> tuple[Any, Optional[list]]:
    """(the PlanResult of ``optimize``, in-process or on ``server``; with ``per_framework`` in-process, the best on
    each other framework where the result has a plan, else None). The per-framework solves start first: on a free
    core they run beside the search (frameworks/compare.py ``FrameworkSolves``), all within ``deadline``."""
    if server is not None:  # grpcio, not OR-Tools: a fast start
        from parplan.client.grpc_client import ServiceError, remote_optimize

        try:
            return remote_optimize(server, spec, top_k=top, pareto=pareto, **solver), None
        except ServiceError as err:
            fail(f"--server {server}: {err}", EXIT_INTERNAL)
    from parplan.client.solve_progress import SolveProgress
    from parplan.solver.cpsat import SolverControls
    from parplan.solver.planner import optimize as run_optimize

    controls = SolverControls(**{k: v for k, v in solver.items() if k != "method"}, **budget_kw)
    solves = None
    if per_framework:
        from parplan.frameworks.compare import FrameworkSolves

        solves = FrameworkSolves(spec, deadline=deadline, concurrent=True, method=solver["method"], controls=controls)
    try:
        with SolveProgress(enabled=progress) as status:
            result = run_optimize(spec, method=solver["method"], top_k=top, pareto=pareto, controls=controls,
                                  on_solution=status.on_solution)
    except BaseException:
        if solves is not None:
            solves.cancel()
        raise
    if solves is None or not result.plans:
        if solves is not None:
            solves.cancel()
        return result, None
    return result, solves.compared(result)


def _print_result(result: Any, spec: Spec, others: Optional[list], output_format: Enum) -> None:
    """``optimize``'s answer on stdout: JSON or YAML (docs/spec.md, with ``per_framework``) or the report."""
    from parplan.client.report import plan_result_to_dict, render_result, to_json

    if output_format in (ResultFormat.json, ResultFormat.yaml):
        data = plan_result_to_dict(result)
        if others is not None:
            from parplan.library.contract import framework_best_to_dict

            data["per_framework"] = [framework_best_to_dict(o) for o in others]
        if output_format == ResultFormat.json:
            typer.echo(to_json(data))
        else:
            import yaml

            typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    else:
        render_result(result, _stdout_console(), spec=spec, per_framework=others)


@app.command()
def validate(spec_path: str = SPEC_ARGUMENT) -> None:
    """Check a spec (and the shape of its `plan:`, if any); print 'ok' or the error."""
    with one_line_errors():
        spec = read_spec(spec_path)
        if spec.plan is not None:  # the plan's shape needs the cost model (NumPy); a spec alone does not
            from parplan.library.evaluation import evaluate_spec

            evaluate_spec(spec)
        typer.echo("ok")
        print_spec_warnings(spec)


@app.command("export")
def export_command(
    plan_path: str = typer.Argument(..., metavar="PLAN.json", help="solver-cli --format json output (plans[--index]), "
                                    "one plan entry, a plan object; or a spec YAML with a plan: section"),
    to: ExportTarget = typer.Option(None, "--to", case_sensitive=False, help="megatron, bridge, torchtitan or "
                                    "deepspeed (default megatron with --emit)"),
    spec_path: str = typer.Option(None, "--spec", metavar="SPEC.yaml", help="the spec the plan was made for (model, "
                                  "training, cluster); not needed when PLAN is a spec with plan:"),
    index: int = typer.Option(0, "--index", min=0, help="which entry of 'plans' (0: the best)"),
    emit: Launcher = EMIT_OPTION,
    out: str = OUT_OPTION,
) -> None:
    """Write a plan for a framework (and, with --emit, the job that launches it)."""
    with one_line_errors():
        from parplan.client import export_cli
        from parplan.library.spec_io import SpecError

        if to is None and emit is None:
            raise SpecError("export: give --to megatron|bridge|torchtitan|deepspeed (or --emit slurm|pytorchjob|volcano)")
        if spec_path is None:
            spec = read_spec(plan_path)
            plan = export_cli.plan_of_spec(spec)
        else:
            spec = read_spec(spec_path)
            plan = export_cli.read_plan_file(plan_path, spec, index)
        export_cli.deliver(export_cli.build_export(spec, plan, to and to.value, emit and emit.value), out)


@app.command("import")
def import_command(
    file_path: str = typer.Argument(..., metavar="FILE", help="an exported Megatron-LM arguments file, torchtitan "
                                    "TOML or DeepSpeed JSON"),
    source: ImportSource = typer.Option(..., "--from", case_sensitive=False, help="megatron, torchtitan or deepspeed"),
    spec_path: str = typer.Option(..., "--spec", metavar="SPEC.yaml", help="the base spec: cluster, assumptions "
                                  "and whatever the file does not state"),
) -> None:
    """Print the spec (with plan:) that an exported file describes; `solver-cli evaluate` prices it."""
    with one_line_errors():
        from parplan.client import export_cli

        typer.echo(export_cli.import_to_yaml(file_path, source.value, read_spec(spec_path)), nl=False)


@app.command()
def schema() -> None:
    """The JSON Schema of spec.yaml (for editor completion, e.g. yaml-language-server)."""
    with one_line_errors():
        import json

        from parplan.client.export_cli import spec_json_schema

        typer.echo(json.dumps(spec_json_schema(), indent=2))


@app.command()
def presets() -> None:
    """The model presets (`model: {preset: NAME}`), with their sources."""
    with one_line_errors():
        from parplan.library.presets import presets_lines  # PyYAML only: no spec model

        for line in presets_lines():
            typer.echo(line)


@app.command()
def knobs() -> None:
    """The cost model's assumption knobs: default value, textbook preset value, source."""
    with one_line_errors():
        from parplan.client.catalog_tables import knobs_table

        _stdout_console().print(knobs_table())


@app.command()
def gpus() -> None:
    """The hardware catalog (bandwidths per GPU and direction), with sources."""
    with one_line_errors():
        from parplan.client.catalog_tables import print_gpu_catalog  # the catalog is plain dataclasses: no pydantic

        print_gpu_catalog(_stdout_console())





app.command("sweep")(sweep)  # client/sweep_cli.py
app.command("serve")(serve_command)  # client/serve_cli.py (the gRPC service)
app.command("ui")(ui_command)  # client/ui_cli.py (the plan explorer)
app.command("replan")(replan_command)  # client/replan_cli.py (issue 43)


def main() -> None:
    """Entry point of the ``solver-cli`` script."""
    try:
        app(prog_name="solver-cli")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # raised outside a command's one_line_errors (typer's own output)
        exit_on_closed_stdout()
    except Exception as err:  # pragma: no cover - every command catches its own errors
        print(f"error: internal error ({type(err).__name__}): {one_line(str(err))}", file=sys.stderr)
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":  # pragma: no cover
    main()
