"""``solver-cli ui``: the plan explorer (client/ui/) served on a local port; its web stack is the optional ``ui``
extra, imported only when the command runs (``solver-cli --help`` stays light: tests/client/test_cli_startup.py)."""

from __future__ import annotations

import typer

from parplan.client.cli_errors import one_line_errors, require_extra


def ui_command(host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (default: this machine only)"),
               port: int = typer.Option(8765, "--port", min=0, max=65535, help="TCP port (0: any free port)"),
               open_browser: bool = typer.Option(True, "--open/--no-open",
                                                 help="open the page in a web browser")) -> None:
    """The plan explorer: a local web page to edit a spec, solve it and see its plans (the 'ui' extra)."""
    with one_line_errors():
        require_extra("ui", "solver-cli ui")
        from parplan.client.ui.runner import serve_forever

        serve_forever(host, port, open_browser, announce=lambda line: typer.echo(line, err=True))
