"""``solver-cli calibrate RUNS... --out profile.yaml`` (issue 38 item 2; client/cli.py registers it).

Reads measured runs (library/measured_runs.py: runs tables, Megatron/NeMo/torchtitan logs, nccl-tests output, the
probe's output), fits the knobs they constrain with the defaults as priors (library/calibrate.py), prints each knob's
move and the leave-one-out error on the rows, and writes the profile (library/profile.py) that ``optimize``,
``evaluate`` and ``sweep`` take with ``--profile``. Exit 2 on bad input: a malformed log line names ``file:line``;
without scipy (the ``fit`` extra) it names ``pip install 'parplan[fit]'``. Docs: docs/calibration.md.
"""

from __future__ import annotations

from typing import Optional

import typer


def calibrate_command(runs: list[str], out: Optional[str], spec: Optional[str], leave_one_out: bool) -> None:
    """The body of the command (inside the CLI's error handling)."""
    import yaml

    from parplan.client.cli_errors import require_extra
    from parplan.library.calibrate import calibrate, profile_document, report_lines
    from parplan.library.measured_runs import gather

    measured = gather(list(runs), default_spec=spec)
    require_extra("fit", "solver-cli calibrate")
    cal = calibrate(measured, leave_one_out=leave_one_out)
    for line in report_lines(cal):
        typer.echo(line)
    if out is not None:
        document = profile_document(cal, measured.sources)
        with open(out, "w") as f:
            f.write("# A calibration profile written by solver-cli calibrate (docs/calibration.md); use it with\n"
                    "# solver-cli optimize|evaluate|sweep --profile, or profile: in a spec.\n")
            yaml.safe_dump(document, f, sort_keys=False, width=120)
        typer.echo(f"wrote {out}", err=True)


def register(app: typer.Typer) -> None:
    """Add the ``calibrate`` command to ``app``."""

    @app.command()
    def calibrate(
        runs: list[str] = typer.Argument(..., metavar="RUNS...", help="measured runs: runs tables (YAML/CSV), "
                                         "training logs, nccl-tests output, probe output", show_default=False),
        out: str = typer.Option(None, "--out", metavar="PROFILE.yaml", help="write the profile here"),
        spec: str = typer.Option(None, "--spec", metavar="SPEC.yaml", help="the spec (with its plan:) of runs given "
                                 "as bare logs, and the GPU of nccl-tests output"),
        leave_one_out: bool = typer.Option(True, "--leave-one-out/--no-leave-one-out", help="refit without each "
                                           "row and print its error"),
    ) -> None:
        """Fit the cost model's knobs to your measured runs (defaults as priors); write a profile."""
        from parplan.client.cli_errors import one_line_errors

        with one_line_errors():
            calibrate_command(runs, out, spec, leave_one_out)


__all__ = ["register", "calibrate_command"]
