"""Deadlines: every phase of a call (search, top-K, frontier, explanation) runs against one wall-clock time."""

from __future__ import annotations

import threading
import time
from typing import Optional


class TimeUp(Exception):
    """The deadline passed (or the call was cancelled) inside a phase; the caller answers with what it has."""


def past(deadline: Optional[float]) -> bool:
    return deadline is not None and time.perf_counter() > deadline


def check(deadline: Optional[float], cancel: Optional[threading.Event] = None) -> None:
    """Raise TimeUp past ``deadline`` or once ``cancel`` is set."""
    if past(deadline) or (cancel is not None and cancel.is_set()):
        raise TimeUp()
