"""Deadlines, cancellation and the memory budget of one call: every phase (search, top-K, frontier, explanation)
runs against one wall-clock time, one cancellation event and one memory budget.

``planner.optimize`` opens a :func:`call_limits` context for the whole call; :func:`check` and :func:`past`
consult it as well as the deadline they are given, so a loop that was handed only a phase's deadline (or none)
still stops at the call's deadline and on cancellation, and :func:`budget` answers whether a structure of a
given size fits before it is built (:class:`MemoryBudget`). The context is a ``contextvars`` variable: each
thread (each server call) sees its own.

The budget is the process's, shared by every call in flight (a server's calls share one process): a structure
fits when the RSS now, the structure each other call in flight was last told fits (:class:`MemoryLedger`: a
claim not yet in the RSS counts, one already built counts twice until that call's next claim) and its own size
stay within the limit; and :func:`past` counts a process already over its limit as the call's time being up, so every call in
flight stops and answers with what it has (Envoy's overload manager does the same with its heap: stop accepting
work past a threshold, https://www.envoyproxy.io/docs/envoy/latest/configuration/operations/overload_manager).
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
        """Whether ``nbytes`` more fit beside the RSS now and what the other calls in flight hold; a yes inside a
        call is recorded in :data:`LEDGER` for that call (the caller builds the structure next)."""
        if nbytes < SMALL_BYTES:
            return True
        return LEDGER.claim(_CURRENT.get(), int(nbytes), self.limit_bytes)

    def require(self, nbytes: float, what: str) -> None:
        """Raise :class:`OverBudget` unless a structure of ``nbytes`` fits."""
        if not self.fits(nbytes):
            raise OverBudget(what, int(nbytes), self.limit_bytes)


@dataclass(frozen=True, eq=False)
class CallLimits:
    """One call's deadline, cancel event and budget; its identity keys the call's claims in :data:`LEDGER`."""

    deadline: Optional[float]
    cancel: Optional[threading.Event]
    budget: MemoryBudget
    owner: object = None  # the outermost call's key in LEDGER (a nested call_limits claims for its outer call)


class MemoryLedger:
    """The structure each call in flight was last told fits (:meth:`MemoryBudget.fits`): a call's check counts the
    RSS now plus the other calls' latest claims, so calls that check at once cannot all take the same room. A
    claim lasts until the call's next claim or its end (by then the structure is built, in the RSS, or freed; a
    claim that stayed for the call's whole life would starve the others with structures long gone). A call's own
    claim is not counted against it: a lone call (the CLI, the library) decides exactly as the RSS alone would."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # id(CallLimits) -> bytes claimed
        self._outside = 0  # hold_outside's bytes
        self._total = 0  # the claims and the outside holds

    def claim(self, call: Optional[CallLimits], nbytes: int, limit_bytes: int) -> bool:
        rss = rss_bytes()
        with self._lock:
            key = id(call.owner) if call is not None else None
            mine = self._held.get(key, 0)
            if rss + nbytes + (self._total - mine) > limit_bytes:
                return False
            if key in self._held:  # the call's latest claim replaces its last: that one is built (in the RSS) or gone
                self._held[key] = nbytes
                self._total += nbytes - mine
            return True

    def calls_in_flight(self) -> int:
        return len(self._held)

    def outside_bytes(self) -> int:
        """What :meth:`hold_outside` holds: memory of this budget outside the process (a sweep's workers)."""
        return self._outside

    @contextlib.contextmanager
    def hold_outside(self, nbytes: int) -> Iterator[None]:
        """``nbytes`` of the budget taken outside this process's RSS (worker processes, each under its own budget
        of that size) for the block: counted by every call's :meth:`claim` and by :func:`past`."""
        with self._lock:
            self._outside += nbytes
            self._total += nbytes
        try:
            yield
        finally:
            with self._lock:
                self._outside -= nbytes
                self._total -= nbytes

    def held_bytes(self) -> int:
        """What the calls in flight hold in all."""
        with self._lock:
            return self._total

    @contextlib.contextmanager
    def call(self, call: CallLimits) -> Iterator[None]:
        """``call`` in flight: its claims count against the others until the block ends."""
        key = id(call.owner)
        with self._lock:
            self._held[key] = 0
        try:
            yield
        finally:
            with self._lock:
                self._total -= self._held.pop(key)


LEDGER = MemoryLedger()


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
    owner = outer.owner if outer is not None else object()
    limits = CallLimits(deadline, cancel if cancel is not None else (outer.cancel if outer else None),
                        MemoryBudget.of_mib(memory_budget_mib), owner)
    token = _CURRENT.set(limits)
    try:
        with LEDGER.call(limits) if outer is None else contextlib.nullcontext():
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
    """Past ``deadline``, past the call's deadline, cancelled, or the process over the call's memory budget
    (:class:`MemoryBudget`: every call in flight stops and answers with what it has)."""
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
    now = now if now is not None else time.perf_counter()
    if limits.deadline is not None and now > limits.deadline:
        return True
    return over_budget(limits, now)


def over_budget(limits: CallLimits, now: Optional[float] = None) -> bool:
    """The process past the call's memory budget, less the room the calls in flight may allocate before their next
    check (:data:`UNCHECKED_BYTES_PER_CALL` each) and what is held outside it (a sweep's workers). A thread outside
    the call (the CP-SAT stopper) may ask with the call's ``limits``."""
    now = time.perf_counter() if now is None else now
    return (_recent_rss_bytes(now) + LEDGER.outside_bytes() + LEDGER.calls_in_flight() * UNCHECKED_BYTES_PER_CALL
            > limits.budget.limit_bytes)


# what one call may allocate between two reads of the RSS without a check (the structures below SMALL_BYTES, NumPy
# temporaries): past() stops the calls this much per call in flight before the limit, so that what they allocate
# before their next check stays within it (benchmarks/abuse.py's budget row measures the peak)
UNCHECKED_BYTES_PER_CALL = 2 * SMALL_BYTES


RSS_READ_INTERVAL_S = 0.01  # past() reads /proc/self/statm at most this often (a read costs ~10 us)
_rss_read: list = [-1.0, 0]  # [perf_counter of the last read, bytes]


def _recent_rss_bytes(now: float) -> int:
    """The process's RSS, read again when the last read is older than :data:`RSS_READ_INTERVAL_S` (shared by
    every thread: one process, one RSS)."""
    if now - _rss_read[0] > RSS_READ_INTERVAL_S:
        _rss_read[1] = rss_bytes()
        _rss_read[0] = now
    return _rss_read[1]


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
