"""Deadlines: every phase of a call (search, top-K, frontier, explanation) runs against one wall-clock time."""

from __future__ import annotations

import time
from typing import Optional


class TimeUp(Exception):
    """The deadline passed (or the call was cancelled) inside a phase; the caller answers with what it has."""


def past(deadline: Optional[float]) -> bool:
    return deadline is not None and time.perf_counter() > deadline


def check(deadline: Optional[float]) -> None:
    if past(deadline):
        raise TimeUp()
