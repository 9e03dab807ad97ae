"""How ``solver-cli`` ends: its exit codes, one ``error:`` line for every failure (usage errors of the CLI
framework included), and the optional extras a command needs (``pip install 'parplan[<extra>]'``).

Exit codes: 0 success; 2 bad input (every :class:`~parplan.costmodel.errors.ParplanError`, a usage error, a
missing extra); 1 an internal error (a bug), also one line and no traceback; 130 interrupted; 141 stdout closed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator

import typer

from parplan.client.cli_options import OPTION_OF_ARGUMENT
from parplan.library.messages import one_line
from parplan.costmodel.errors import ArgumentError, ParplanError

EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2


class CliCommands(typer.core.TyperGroup):
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


def fail(message: str, code: int) -> None:
    typer.echo(f"error: {one_line(message)}", err=True)
    raise typer.Exit(code)


def exit_on_closed_stdout() -> None:
    """Stdout's reader went away (``solver-cli presets | head -3``): exit 141 (128 + SIGPIPE) quietly, the rest
    to /dev/null so the final flush raises nothing (Python docs, library/signal.html "Note on SIGPIPE")."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(141)


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Bad input -> exit 2 with one line; anything unexpected -> exit 1 with one line, never a traceback."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except ArgumentError as err:
        fail(err.for_option(OPTION_OF_ARGUMENT.get(err.argument, err.argument)), EXIT_BAD_INPUT)
    except ParplanError as err:  # SpecError, PlanError, UnknownGPU, ...
        fail(str(err), EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except BrokenPipeError:
        exit_on_closed_stdout()
    except Exception as err:  # a bug: report it on one line (usage errors of the CLI framework pass through)
        if type(err).__module__.split(".")[0] in ("click", "typer"):
            raise
        fail(f"internal error ({type(err).__name__}): {err}", EXIT_INTERNAL)


# optional extras (pyproject [project.optional-dependencies]) -> the top-level modules they install
EXTRA_MODULES = {"server": ("grpc", "grpc_health", "grpc_reflection", "grpc_status"), "plot": ("matplotlib",),
                 "ui": ("starlette", "uvicorn"), "fit": ("scipy",)}


class MissingExtra(ParplanError):
    """A command needs an optional extra that is not installed (exit 2: the user installs it)."""


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` naming ``pip install 'parplan[<extra>]'`` unless the extra's modules import."""
    import importlib.util

    missing = [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(f"{what} needs the optional '{extra}' extra ({', '.join(missing)} not installed): "
                           f"pip install 'parplan[{extra}]'")
