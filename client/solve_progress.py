"""``solver-cli optimize``'s live status line while the solver runs (``--progress``): a module of its own, so the
default ``optimize`` imports no export, import or plot machinery (client/export_cli.py re-exports it)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from rich.console import Console
from rich.live import Live
from rich.text import Text

if TYPE_CHECKING:
    from parplan.costmodel.evaluation.ledger import Evaluation


class SolveProgress:
    """A one-line live status on stderr while the solver runs (elapsed, best step time so far, bound, gap),
    fed by ``optimize(on_solution=...)``; by default only when stderr is a terminal. Forced on (``--progress``)
    with stderr not a terminal (a pipe, a log file), where a live line cannot redraw, it prints one plain line
    per improving plan and a last one when the solve ends."""

    def __init__(self, enabled: Optional[bool] = None, console: Optional[Console] = None):
        self.console = console or Console(stderr=True)
        self.enabled = self.console.is_terminal if enabled is None else enabled
        self.t0 = time.perf_counter()
        self.best_s: Optional[float] = None
        self.bound_s: Optional[float] = None
        self.solutions = 0
        self._live: Optional[Live] = None

    def on_solution(self, evaluation: Evaluation, objective_s: float, bound_s: float) -> None:
        self.solutions += 1
        if self.best_s is None or objective_s < self.best_s:
            self.best_s = objective_s
        self.bound_s = bound_s if self.bound_s is None else max(self.bound_s, bound_s)
        if self.enabled and self._live is None:  # not a terminal: a line per improving plan
            self.console.print(self.line(), soft_wrap=True)

    def line(self) -> Text:
        elapsed = time.perf_counter() - self.t0
        text = Text(f"solving {elapsed:5.1f} s", style="bold")
        if self.best_s is None:
            return text + Text("  (no plan yet)", style="dim")
        text.append(f"  best {self.best_s:.3f} s")
        if self.bound_s is not None:
            gap = max(0.0, (self.best_s - self.bound_s) / self.best_s) if self.best_s > 0 else 0.0
            text.append(f"  bound {self.bound_s:.3f} s  gap {gap * 100:.2f} %")
        text.append(f"  ({self.solutions} improving)", style="dim")
        return text

    def __rich__(self) -> Text:
        return self.line()

    def __enter__(self) -> "SolveProgress":
        if self.enabled and self.console.is_terminal:
            self._live = Live(self, console=self.console, refresh_per_second=4, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None
        elif self.enabled:
            self.console.print(self.line().append("  done", style="bold"), soft_wrap=True)
