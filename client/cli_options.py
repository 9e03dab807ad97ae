"""``solver-cli``'s option choices and the options several commands share (client/cli.py)."""

from __future__ import annotations

from enum import Enum

import typer

# library argument (solver.arguments) -> the option of `solver-cli optimize` that sets it
OPTION_OF_ARGUMENT = {"top_k": "--top", "method": "--method", "pareto": "--pareto", "time_limit_s": "--time-limit",
                      "workers": "--workers", "seed": "--seed", "deterministic": "--deterministic",
                      "memory_budget_mib": "--memory-budget-mib"}


def choices(name: str, values) -> type[Enum]:
    """An option's choices: a str Enum whose member names are its values (what typer shows and parses)."""
    return Enum(name, {v: v for v in values}, type=str)


OutputFormat = choices("OutputFormat", ("table", "json"))
ResultFormat = choices("ResultFormat", ("table", "json", "yaml"))
Method = choices("Method", ("cpsat", "exhaustive"))
ParetoAxis = choices("ParetoAxis", ("memory", "gpus"))
# frameworks.export.TARGETS and frameworks.jobs.LAUNCHERS, spelled out: importing those modules pulls in the spec
# models, which `solver-cli --help` must not (issue 41 item 2); tests/client/test_cli_startup.py checks they agree
EXPORT_TARGETS = ("megatron", "bridge", "torchtitan", "deepspeed")
LAUNCHERS = ("slurm", "pytorchjob", "volcano")
ExportTarget = choices("ExportTarget", EXPORT_TARGETS)
Launcher = choices("Launcher", LAUNCHERS)
ImportSource = choices("ImportSource", ("megatron", "torchtitan", "deepspeed"))
EXPORT_OPTION = typer.Option(None, "--export", case_sensitive=False, help="write the best plan for a framework: "
                             "megatron (arguments), bridge (overrides), torchtitan (TOML), deepspeed (JSON)")
EMIT_OPTION = typer.Option(None, "--emit", case_sensitive=False, help="write a job around the export (default "
                           "--export megatron): slurm (sbatch + torchrun), pytorchjob (Kubeflow YAML) or volcano (Volcano Job YAML)")
OUT_OPTION = typer.Option(None, "--out", metavar="DIR", help="write the export/job file into DIR and print the "
                          "report; without it the file goes to stdout instead of the report")
HF_CONFIG_OPTION = typer.Option(None, "--hf-config", metavar="CONFIG.json", help="take the model from a Hugging "
                                "Face config.json (replaces the spec's model section)")


SPEC_ARGUMENT = typer.Argument(..., metavar="SPEC.yaml", help="spec file (see docs/spec.md); '-' reads stdin",
                               show_default=False)
FORMAT_OPTION = typer.Option(OutputFormat.table, "--format", "-f", help="table (for people) or json (docs/spec.md)",
                             case_sensitive=False)
MEMORY_MARGIN_OPTION = typer.Option(None, "--memory-margin", metavar="GIB", help="GiB per GPU kept free below "
                                    "the usable memory (0 to 4096; overrides search.memory_margin_gib and the memory band's margin)")
RANK_BY_OPTION = typer.Option(None, "--rank-by", metavar="point|upper", help="order the plans by the predicted step "
                              "time (point) or the upper end of its band (upper); overrides search.rank_by")


def _print_version(value: bool) -> None:
    if value:
        from parplan import __version__

        typer.echo(f"solver-cli (parplan) {__version__}")
        raise typer.Exit()


VERSION_OPTION = typer.Option(None, "--version", callback=_print_version, is_eager=True,
                              help="print parplan's version and exit")
PROFILE_OPTION = typer.Option(None, "--profile", metavar="PROFILE.yaml", help="a calibration profile "
                              "(solver-cli calibrate; docs/calibration.md): its knobs under the spec's own")
