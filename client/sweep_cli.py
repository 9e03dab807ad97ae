"""``solver-cli sweep SWEEP.yaml --out DIR`` and ``solver-cli sweep --report DIR`` (client/cli.py registers it).

Exit codes as every command: 0 done (points that are infeasible or failed are records, not errors), 2 bad
input in one line (a bad sweep spec naming the axis and the value; ``--engine ray`` without Ray naming
``pip install 'parplan[ray]'``), 130 interrupted (every finished point is stored: ``--resume`` continues).
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from parplan.client.cli_errors import fail, one_line_errors
from parplan.client.cli_options import PROFILE_OPTION


def sweep_command(sweep_path: Optional[str], out: Optional[str], report_dir: Optional[str], engine: str,
                  jobs: Optional[int], ray_address: Optional[str], resume: bool, top: Optional[int],
                  time_limit: Optional[float], deterministic: Optional[bool], progress: Optional[bool],
                  fail, profile: Optional[str] = None) -> None:
    """The body of the command; ``fail(message, code)`` prints one ``error:`` line and exits."""
    from rich.console import Console

    from parplan.library.sweep.engines import EngineUnavailable
    from parplan.library.sweep.points import SweepError, load_sweep
    from parplan.library.sweep.report import render_table
    from parplan.library.sweep.run import report, run_sweep

    console = Console(file=sys.stdout, highlight=False, soft_wrap=False,
                      width=None if sys.stdout.isatty() else 220)
    if report_dir is not None:
        if sweep_path is not None:
            raise SweepError("--report DIR takes no SWEEP.yaml (it reads the folder's store alone)")
        records, summary = report(report_dir)
        render_table(records, summary, console)
        return
    if sweep_path is None:
        raise SweepError("give SWEEP.yaml (or --report DIR)")
    if out is None:
        raise SweepError("--out DIR: needed (the result store and the outputs go there)")
    from parplan.library.profile import profile_path_or_none

    sweep = load_sweep(sweep_path, profile=profile_path_or_none(profile))
    overrides = {k: v for k, v in (("top_k", top), ("time_limit_s", time_limit), ("deterministic", deterministic))
                 if v is not None}
    if overrides:
        from pydantic import ValidationError

        from parplan.library.spec_io import validation_error_message
        from parplan.library.sweep.spec import SolverSettings

        try:
            solver = SolverSettings.model_validate({**sweep.spec.solver.model_dump(), **overrides})
        except ValidationError as err:
            raise SweepError(validation_error_message(err, prefix=("solver",))) from None
        sweep = type(sweep)(spec=sweep.spec.model_copy(update={"solver": solver}), base=sweep.base,
                            points=sweep.points)
    try:
        records, summary, counts = run_sweep(sweep, out, engine=engine, jobs=jobs, ray_address=ray_address,
                                             resume=resume,
                                             progress=sys.stderr.isatty() if progress is None else progress)
    except EngineUnavailable as err:
        fail(str(err), 2)
    except KeyboardInterrupt:
        fail(f"interrupted: every finished point is in {out}/store; rerun with --resume to continue", 130)
    render_table(records, summary, console)
    typer.echo(f"{counts['points']} points: {counts['solved']} solved ({counts['failed']} failed), "
               f"{counts['skipped']} already in the store; outputs in {out}", err=True)


__all__ = ["sweep_command"]


def sweep(
    sweep_path: str = typer.Argument(None, metavar="SWEEP.yaml", help="the sweep: base spec, axes, budget, prices "
                                     "(library/sweep/spec.py)", show_default=False),
    out: str = typer.Option(None, "--out", metavar="DIR", help="result store and outputs (points.jsonl, csv, ...)"),
    report_dir: str = typer.Option(None, "--report", metavar="DIR", help="rebuild tables and plots from DIR's "
                                   "store alone"),
    engine: str = typer.Option("local", "--engine", help="local (a process pool) or ray"),
    jobs: int = typer.Option(None, "--jobs", help="solves at once (default: one per core)"),
    ray_address: str = typer.Option(None, "--ray-address", metavar="ADDR", help="join this Ray cluster "
                                    "(default: start a local Ray runtime)"),
    resume: bool = typer.Option(False, "--resume", help="skip points already in DIR's store"),
    top: int = typer.Option(None, "--top", "-k", help="plans per point (overrides solver.top_k)"), profile: str = PROFILE_OPTION,
    time_limit: float = typer.Option(None, "--time-limit", help="seconds per solve (overrides solver.time_limit_s)"),
    deterministic: bool = typer.Option(None, "--deterministic/--no-deterministic", help="byte-identical "
                                       "records (overrides solver.deterministic)"),
    progress: bool = typer.Option(None, "--progress/--no-progress", help="progress bar on stderr (default: on a "
                                  "terminal)"),
) -> None:
    """Capacity sweep: plan every point of a grid of what-ifs; time, GPU-hours, cost, energy, Pareto, knees."""
    with one_line_errors():
        sweep_command(sweep_path, out, report_dir, engine, jobs, ray_address, resume, top, time_limit,
                      deterministic, progress, fail, profile)
