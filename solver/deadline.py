"""Deadlines, cancellation and the memory budget of one call: every phase (search, top-K, frontier, explanation)
runs against one wall-clock time, one cancellation event and one memory budget.

``planner.optimize`` opens a :func:`call_limits` context for the whole call; :func:`check` and :func:`past`
consult it as well as the deadline they are given, so a loop that was handed only a phase's deadline (or none)
still stops at the call's deadline and on cancellation, and :func:`budget` answers whether a structure of a
given size fits before it is built (:class:`MemoryBudget`). The context is a ``contextvars`` variable: each
thread (each server call) sees its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
import time
from dataclasses import dataclass
from numbers import Integral
from typing import Iterator, Optional

from parplan.costmodel.errors import ArgumentError

try:
    import resource
except ImportError:  # pragma: no cover - not on Linux
    resource = None

MIB = 1 << 20
# the default of SolverControls.memory_budget_mib: the whole process (interpreter, NumPy, OR-Tools ~250 MiB) within
# the Deployment's 2 GiB container limit with room for a second call and the gRPC runtime
DEFAULT_MEMORY_BUDGET_MIB = 1536
MIN_MEMORY_BUDGET_MIB = 256  # below this the interpreter and OR-Tools alone do not fit
MAX_MEMORY_BUDGET_MIB = 1 << 22  # 4 TiB
SMALL_BYTES = 4 * MIB  # structures below this are not checked (the check would cost more than the structure)


class TimeUp(Exception):
    """The deadline passed (or the call was cancelled) inside a phase; the caller answers with what it has."""


class OverBudget(TimeUp):
    """A structure that would take the process past its memory budget; nothing of it was built. The caller
    solves another way or leaves that part unsolved (FEASIBLE/UNKNOWN with a bound, never an OOM). A kind of
    :class:`TimeUp`: every phase that stops with what it has when time is up does the same here."""

    def __init__(self, what: str, nbytes: int, budget_bytes: int):
        super().__init__(f"{what}: {nbytes / MIB:.0f} MiB would exceed the memory budget of {budget_bytes / MIB:.0f} MiB")
        self.what, self.nbytes = what, nbytes


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """The process's resident set now (Linux: /proc/self/statm; elsewhere the peak so far, an over-estimate)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        if resource is None:  # pragma: no cover
            return 0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


@dataclass(frozen=True)
class MemoryBudget:
    """The resident memory the process may grow to while it solves. A structure of ``nbytes`` fits when the
    process's RSS now plus ``nbytes`` stays within the limit (every call of a server shares one process, so the
    check is against the process, not a per-call tally)."""

    limit_bytes: int

    @staticmethod
    def of_mib(mib: Optional[int]) -> "MemoryBudget":
        """``mib`` MiB; None: the process default (:func:`set_default_memory_budget`)."""
        return MemoryBudget((_process_default_mib if mib is None else int(mib)) * MIB)

    def fits(self, nbytes: float) -> bool:
        if nbytes < SMALL_BYTES:
            return True
        return rss_bytes() + nbytes <= self.limit_bytes

    def require(self, nbytes: float, what: str) -> None:
        """Raise :class:`OverBudget` unless a structure of ``nbytes`` fits."""
        if not self.fits(nbytes):
            raise OverBudget(what, int(nbytes), self.limit_bytes)


@dataclass(frozen=True)
class CallLimits:
    deadline: Optional[float]
    cancel: Optional[threading.Event]
    budget: MemoryBudget


_process_default_mib = DEFAULT_MEMORY_BUDGET_MIB


def set_default_memory_budget(mib: int) -> None:
    """The budget of every call whose ``SolverControls.memory_budget_mib`` is None (``solver-cli serve
    --memory-budget-mib``: the server's calls share the process, and the budget is the process's RSS)."""
    global _process_default_mib
    check_memory_budget(mib)
    _process_default_mib = int(mib)


def check_memory_budget(mib: object, name: str = "memory_budget_mib") -> None:
    """An integer number of MiB from :data:`MIN_MEMORY_BUDGET_MIB` to :data:`MAX_MEMORY_BUDGET_MIB`
    (solver/arguments.py applies it to SolverControls)."""
    low, high = MIN_MEMORY_BUDGET_MIB, MAX_MEMORY_BUDGET_MIB
    if isinstance(mib, bool) or not isinstance(mib, Integral):
        raise ArgumentError(name, f"must be an integer from {low} to {high}", mib)
    if not low <= mib <= high:
        raise ArgumentError(name, f"must be from {low} to {high}", mib)


def default_memory_budget_mib() -> int:
    return _process_default_mib


_CURRENT: contextvars.ContextVar[Optional[CallLimits]] = contextvars.ContextVar("parplan_call_limits", default=None)


@contextlib.contextmanager
def call_limits(deadline: Optional[float], cancel: Optional[threading.Event] = None,
                memory_budget_mib: Optional[int] = None) -> Iterator[CallLimits]:
    """The limits every loop of this call (in this thread) checks; nested calls keep the earliest deadline."""
    outer = _CURRENT.get()
    if outer is not None and outer.deadline is not None:
        deadline = outer.deadline if deadline is None else min(deadline, outer.deadline)
    limits = CallLimits(deadline, cancel if cancel is not None else (outer.cancel if outer else None),
                        MemoryBudget.of_mib(memory_budget_mib))
    token = _CURRENT.set(limits)
    try:
        yield limits
    finally:
        _CURRENT.reset(token)


def current() -> Optional[CallLimits]:
    return _CURRENT.get()


def budget() -> MemoryBudget:
    """The memory budget of the call in progress (the default budget outside a call)."""
    limits = _CURRENT.get()
    return limits.budget if limits is not None else MemoryBudget.of_mib(None)


def past(deadline: Optional[float]) -> bool:
    """Past ``deadline``, past the call's deadline, or cancelled."""
    now = None
    if deadline is not None:
        now = time.perf_counter()
        if now > deadline:
            return True
    limits = _CURRENT.get()
    if limits is None:
        return False
    if limits.cancel is not None and limits.cancel.is_set():
        return True
    return limits.deadline is not None and (now if now is not None else time.perf_counter()) > limits.deadline


def check(deadline: Optional[float] = None, cancel: Optional[threading.Event] = None) -> None:
    """Raise TimeUp past ``deadline`` (or the call's), or once ``cancel`` (or the call's cancel event) is set."""
    if past(deadline) or (cancel is not None and cancel.is_set()):
        raise TimeUp()


def checked_range(n: int, every: int = 4096) -> Iterator[int]:
    """``range(n)`` that checks the call's deadline and cancel event every ``every`` items (:func:`check`): for
    per-stage loops over up to 2^20 stages."""
    for i in range(n):
        if i % every == 0:
            check()
        yield i
