"""``solver-cli``: optimize a spec, evaluate its plan, validate specs, list the assumption knobs and GPUs.

Exit codes: 0 success; 2 bad input (unreadable or invalid spec, a plan that contradicts the spec, an
option out of its range, or a usage error) with ONE line ``error: <field>: <rule>`` on stderr; 1 an
internal error (a bug: also one line, no traceback). Every :class:`~parplan.costmodel.errors.ParplanError`
is bad input; no input that validates may reach exit 1.

Warnings about a spec (settings it accepts but ignores, ``costmodel.spec.spec_warnings``) go to stderr
as ``warning: ...`` lines once the command has succeeded, so ``--format json`` output stays parseable.
"""

from __future__ import annotations

import contextlib
import sys
from enum import Enum
from typing import Any, Iterator, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from parplan.client.evaluation import evaluate_spec
from parplan.client.report import evaluation_to_dict, render_evaluation, to_json
from parplan.client.spec_io import MAX_SPEC_BYTES, SpecError, load_spec_file, one_line, parse_spec
from parplan.costmodel.assumptions import PRESETS, describe_knobs
from parplan.costmodel.errors import ArgumentError, ParplanError
from parplan.costmodel.hardware import ALIASES, CATALOG
from parplan.costmodel.spec import Spec, spec_warnings

EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
# library argument (solver.arguments) -> the option of `solver-cli optimize` that sets it
OPTION_OF_ARGUMENT = {"top_k": "--top", "method": "--method", "pareto": "--pareto", "time_limit_s": "--time-limit",
                      "workers": "--workers", "seed": "--seed", "deterministic": "--deterministic"}


class _Commands(typer.core.TyperGroup):
    """The commands, with the CLI framework's multi-line usage errors (a bad option value, an unknown
    command) printed as one ``error:`` line with exit 2, as all bad input is; the help screen shown for
    no arguments stays."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as err:  # typer vendors click: its UsageError derives from this
            usage_error = (hasattr(err, "format_message") and getattr(err, "exit_code", None) == EXIT_BAD_INPUT
                           and not isinstance(err, (typer.Exit, typer.Abort))
                           and type(err).__name__ != "NoArgsIsHelpError")
            if not usage_error:
                raise
            typer.echo(f"error: {one_line(err.format_message())}", err=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None


app = typer.Typer(
    cls=_Commands,
    name="solver-cli",
    help="Plan and evaluate parallelism (TP/CP/PP/DP/EP, schedules, recompute, ZeRO) for LLM training.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class OutputFormat(str, Enum):
    table = "table"
    json = "json"


class ResultFormat(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


class Method(str, Enum):
    cpsat = "cpsat"
    exhaustive = "exhaustive"


class ParetoAxis(str, Enum):
    memory = "memory"
    gpus = "gpus"


SPEC_ARGUMENT = typer.Argument(..., metavar="SPEC.yaml", help="spec file (see CONTRACT.md); '-' reads stdin",
                               show_default=False)
FORMAT_OPTION = typer.Option(OutputFormat.table, "--format", "-f", help="table (for people) or json (CONTRACT.md)",
                             case_sensitive=False)


def _fail(message: str, code: int) -> None:
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """Bad input -> exit 2 with one line; anything unexpected -> exit 1 with one line, never a traceback."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except ArgumentError as err:
        _fail(err.for_option(OPTION_OF_ARGUMENT.get(err.argument, err.argument)), EXIT_BAD_INPUT)
    except ParplanError as err:  # SpecError, PlanError, UnknownGPU, ...
        _fail(str(err), EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as err:  # a bug: report it on one line (usage errors of the CLI framework pass through)
        if type(err).__module__.split(".")[0] in ("click", "typer"):
            raise
        _fail(f"internal error ({type(err).__name__}): {err}", EXIT_INTERNAL)


def _stdout_console() -> Console:
    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


def _warn(spec: Spec, pareto: Optional[str] = None) -> None:
    """The spec's warnings on stderr, one ``warning: ...`` line each."""
    for warning in spec_warnings(spec, pareto=pareto):
        typer.echo(f"warning: {one_line(warning)}", err=True)


def read_spec(path: str) -> Spec:
    """Load a spec from a file, or from stdin for '-'."""
    if path == "-":
        text = sys.stdin.read(MAX_SPEC_BYTES + 1)
        if len(text) > MAX_SPEC_BYTES:
            raise SpecError(f"<stdin>: larger than {MAX_SPEC_BYTES // 2**20} MiB; not a spec file")
        return parse_spec(text, name="<stdin>")
    return load_spec_file(path)


@app.command()
def evaluate(spec_path: str = SPEC_ARGUMENT, output_format: OutputFormat = FORMAT_OPTION) -> None:
    """Evaluate the spec's fixed `plan:` (omitted keys take defaults) with the cost model."""
    with _errors():
        spec = read_spec(spec_path)
        evaluation = evaluate_spec(spec)
        if output_format == OutputFormat.json:
            typer.echo(to_json(evaluation_to_dict(evaluation)))
        else:
            render_evaluation(evaluation, _stdout_console(), spec=spec)
        _warn(spec)


@app.command()
def optimize(
    spec_path: str = SPEC_ARGUMENT,
    top: int = typer.Option(1, "--top", "-k", help="return the K best distinct choices (1-100)"),
    pareto: ParetoAxis = typer.Option(None, "--pareto", help="also the exact Pareto frontier of step time vs "
                                      "peak memory or vs GPU count", case_sensitive=False),
    output_format: ResultFormat = typer.Option(ResultFormat.table, "--format", "-f", case_sensitive=False,
                                               help="table (for people), json (CONTRACT.md) or yaml"),
    time_limit: float = typer.Option(60.0, "--time-limit", help="CP-SAT limit per solve, seconds (0 < t ≤ 86400)"),
    method: Method = typer.Option(Method.cpsat, "--method", case_sensitive=False,
                                  help="cpsat, or exhaustive (the oracle; fine for small spaces)"),
    workers: int = typer.Option(0, "--workers", help="CP-SAT workers (0: all cores; at most 256)"),
    deterministic: bool = typer.Option(False, "--deterministic", help="one worker, fixed seed, deterministic "
                                       "time limit: byte-identical answers"),
    seed: int = typer.Option(1, "--seed", help="CP-SAT random seed (0 to 2**31-1)"),
) -> None:
    """Find the best plan(s) for the spec's objective; why it wins; the runners-up; why nothing fits."""
    with _errors():
        from parplan.client.report import plan_result_to_dict, render_result
        from parplan.solver.arguments import check_optimize_arguments
        from parplan.solver.cpsat import SolverControls
        from parplan.solver.planner import optimize as run_optimize

        check_optimize_arguments(top_k=top, method=method.value, pareto=pareto.value if pareto else None,
                                 time_limit_s=time_limit, workers=workers, seed=seed, deterministic=deterministic)
        spec = read_spec(spec_path)
        controls = SolverControls(time_limit_s=time_limit, workers=workers, deterministic=deterministic, seed=seed)
        result = run_optimize(spec, method=method.value, top_k=top, pareto=pareto.value if pareto else None,
                              controls=controls)
        if output_format == ResultFormat.json:
            typer.echo(to_json(plan_result_to_dict(result)))
        elif output_format == ResultFormat.yaml:
            import yaml

            typer.echo(yaml.safe_dump(plan_result_to_dict(result), sort_keys=False, allow_unicode=True))
        else:
            render_result(result, _stdout_console(), spec=spec)
        _warn(spec, pareto.value if pareto else None)


@app.command()
def validate(spec_path: str = SPEC_ARGUMENT) -> None:
    """Check a spec (and the shape of its `plan:`, if any); print 'ok' or the error."""
    with _errors():
        spec = read_spec(spec_path)
        if spec.plan is not None:
            evaluate_spec(spec)
        typer.echo("ok")
        _warn(spec)


def _knob_value(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@app.command()
def knobs() -> None:
    """The cost model's assumption knobs: default value, textbook preset value, source."""
    with _errors():
        textbook = PRESETS.get("textbook", {})
        table = Table(title="Assumption knobs: spec `assumptions:` takes `preset: default | textbook` and any "
                            "knob by name", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("knob · meaning and source")
        table.add_column("default", justify="right", no_wrap=True)
        table.add_column("textbook", justify="right", no_wrap=True)
        for name, default, description in describe_knobs():
            tb = _knob_value(textbook[name]) if name in textbook and textbook[name] != default else ""
            table.add_row(Text.assemble((name, "bold"), "\n  ", (description, "dim")), _knob_value(default), tb)
        table.caption = "textbook: blank where the preset keeps the default"
        table.caption_justify = "left"
        _stdout_console().print(table)


@app.command()
def gpus() -> None:
    """The hardware catalog (bandwidths per GPU and direction), with sources."""
    with _errors():
        aliases: dict[str, list[str]] = {}
        for alias, target in ALIASES.items():
            aliases.setdefault(target, []).append(alias)
        table = Table(title="GPU catalog: `cluster.gpu` (numeric fields overridable under `cluster:`)",
                      title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
        for header, justify in (("gpu", "left"), ("HBM\n(GiB)", "right"), ("BF16\nTFLOP/s", "right"),
                                ("FP8\nTFLOP/s", "right"), ("NVLink\ndomain", "right"), ("NVLink\n(GB/s)", "right"),
                                ("network\n(GB/s)", "right"), ("α (µs)\nnode/net", "right")):
            table.add_column(header, justify=justify, no_wrap=True)
        for name, g in CATALOG.items():
            table.add_row(name, f"{g.memory_gib:g}", f"{g.peak_bf16_tflops:g}",
                          "-" if g.peak_fp8_tflops is None else f"{g.peak_fp8_tflops:g}", str(g.nvlink_domain_size),
                          f"{g.intra_node_bandwidth_gbps:g}", f"{g.inter_node_bandwidth_gbps:g}",
                          f"{g.intra_node_latency_us:g}/{g.inter_node_latency_us:g}")
        table.caption = ("TFLOP/s dense; GB/s = 1e9 B/s per GPU per direction; α: latency per message inside "
                         "the NVLink domain / across the network")
        table.caption_justify = "left"
        console = _stdout_console()
        console.print(table)
        console.print(Text("Sources", style="bold"))
        for name, g in CATALOG.items():
            extra = f"nominal {g.memory_gb_nominal:g} GB"
            if aliases.get(name):
                extra += "; aliases " + ", ".join(aliases[name])
            console.print(Text.assemble((name, "bold"), f" ({extra})"))
            grid = Table.grid(padding=(0, 1))
            grid.add_column(no_wrap=True)
            grid.add_column()
            for source in g.sources:
                grid.add_row("  -", source)
            console.print(grid)


def main() -> None:
    """Entry point of the ``solver-cli`` script."""
    try:
        app(prog_name="solver-cli")
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as err:  # pragma: no cover - every command catches its own errors
        print(f"error: internal error ({type(err).__name__}): {one_line(str(err))}", file=sys.stderr)
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":  # pragma: no cover
    main()
