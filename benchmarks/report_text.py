"""A benchmark's report: printed, and written to ``--out`` where one is given (its folder made)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence


def emit(lines: Sequence[str], out: Optional[Path]) -> str:
    """``lines`` as one text ending in a newline, printed and (``out``) written; returns the text."""
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return text
