"""The service's admission: ``slots`` solver slots and a FIFO queue of waiting calls (server/service.py's frame
calls :meth:`Admission.acquire` before a solve). A call that gets no slot raises :class:`Abort` with its status."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from typing import Iterator, Optional

from google.rpc import code_pb2, status_pb2

DEFAULT_MAX_QUEUE = 64  # calls waiting for a solver slot beyond the slots
MAX_QUEUE_WAIT_S = 600.0  # a call without a deadline waits at most this long for a slot


class Abort(Exception):
    """A call ended with ``status`` before its solve (no slot, shutting down, cancelled)."""

    def __init__(self, status: status_pb2.Status):
        self.status = status


def plain_status(code: int, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=code, message=message)



class Admission:
    """``slots`` solver slots and a FIFO queue of at most ``max_queue`` waiting calls.

    :meth:`acquire` takes a free slot at once, else waits in line until a slot is handed over, the call's
    deadline passes, the call ends (cancel) or the server drains; a call that finds ``max_queue`` calls
    already waiting is refused at once (RESOURCE_EXHAUSTED: the client's retry policy backs off)."""

    def __init__(self, slots: int, max_queue: int):
        self.slots, self.max_queue = slots, max_queue
        self._lock = threading.Lock()
        self._free = slots
        self._waiting: "collections.deque[threading.Event]" = collections.deque()
        self.active = 0  # calls holding a slot

    @property
    def queued(self) -> int:
        return len(self._waiting)

    def acquire(self, cancel: threading.Event, draining: threading.Event,
                deadline: Optional[float]) -> tuple[float, int]:
        """(seconds waited, calls ahead on arrival); raises :class:`Abort` when no slot is had."""
        t0 = time.monotonic()
        with self._lock:
            if draining.is_set():
                raise Abort(plain_status(code_pb2.UNAVAILABLE, "server is shutting down"))
            if self._free > 0 and not self._waiting:
                self._free -= 1
                self.active += 1
                return 0.0, 0
            ahead = len(self._waiting)
            if ahead >= self.max_queue:
                raise Abort(plain_status(code_pb2.RESOURCE_EXHAUSTED, (
                    f"all {self.slots} solver slots are busy and {ahead} calls are waiting (the queue's bound); "
                    "retry with backoff")))
            turn = threading.Event()
            self._waiting.append(turn)
        limit = t0 + MAX_QUEUE_WAIT_S if deadline is None else min(deadline, t0 + MAX_QUEUE_WAIT_S)
        while True:
            left = limit - time.monotonic()
            handed = turn.wait(max(0.0, min(0.05, left)))
            if handed and not draining.is_set():
                return time.monotonic() - t0, ahead
            reason = None
            if draining.is_set():  # a slot handed over after the drain's refusal began is passed on (below)
                reason = plain_status(code_pb2.UNAVAILABLE, "server is shutting down")
            elif cancel.is_set():
                reason = plain_status(code_pb2.CANCELLED, "the call ended while waiting for a solver slot")
            elif time.monotonic() >= limit:
                reason = plain_status(code_pb2.DEADLINE_EXCEEDED if deadline is not None and limit >= deadline else
                                 code_pb2.RESOURCE_EXHAUSTED,
                                 f"no solver slot within {time.monotonic() - t0:.1f} s (all {self.slots} busy)")
            if reason is None:
                continue
            with self._lock:
                if turn.is_set():  # a slot was handed over just now: pass it on
                    self._release_locked()
                else:
                    self._waiting.remove(turn)
            raise Abort(reason)

    @contextlib.contextmanager
    def slot(self, cancel: threading.Event, draining: threading.Event,
             deadline: Optional[float]) -> "Iterator[tuple[float, int]]":
        """Hold a slot for the ``with`` block: acquire and release are one construct, so a raise anywhere
        after the slot is had (a dead call's ``send_initial_metadata``, a cancel) still releases it."""
        had = self.acquire(cancel, draining, deadline)
        try:
            yield had
        finally:
            self.release()

    def release(self) -> None:
        with self._lock:
            self._release_locked()

    def _release_locked(self) -> None:
        self.active -= 1
        if self._waiting:
            self._waiting.popleft().set()  # the slot goes to the first in line
            self.active += 1
        else:
            self._free += 1


