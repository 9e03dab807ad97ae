"""The calls inside a server's handlers, for the drain (server/app.py's ``RunningServer.drain``): every call is
counted from its handler's first line (before its request is read) to its end, and every call past its request
registers its time-up event, which :meth:`CallRegistry.time_up` sets to end the solves early (each answers with
its best plan so far, as at its own time limit: solver/deadline.py reads the event as the call's cancel)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator


class CallRegistry:
    """Counts the calls in their handlers and holds the time-up events of those past their request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.calls_in_handler = 0  # from the handler's first line: reading the request, queued, solving, streaming
        self._time_ups: dict[threading.Event, int] = {}  # a call's time-up event -> its parts not yet ended
        self.timed_up = threading.Event()  # set by time_up(): every registered event is set, now and on arrival

    @property
    def calls_past_request(self) -> int:
        """Calls that have read their request; the rest of :attr:`calls_in_handler` are still reading theirs."""
        with self._lock:
            return len(self._time_ups)

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """Count a call in :attr:`calls_in_handler` for the block (its handler)."""
        with self._lock:
            self.calls_in_handler += 1
        try:
            yield
        finally:
            with self._lock:
                self.calls_in_handler -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def timed(self, time_up_event: threading.Event, add_callback: Callable[[Callable[[], None]], bool]
              ) -> Iterator[None]:
        """Register ``time_up_event`` for the block: :meth:`time_up` sets it. The call stays registered until the
        block has ended AND gRPC has ended the call (``add_callback``: the context's), so the drain does not stop
        the server on an answer still in flight."""
        with self._lock:
            self._time_ups[time_up_event] = 2  # the handler's return and the call's end
            if self.timed_up.is_set():
                time_up_event.set()

        def part_done() -> None:
            with self._lock:
                if self._time_ups.get(time_up_event, 1) <= 1:
                    self._time_ups.pop(time_up_event, None)
                    self._changed.notify_all()
                else:
                    self._time_ups[time_up_event] -= 1

        if not add_callback(part_done):
            part_done()  # the call has already ended
        try:
            yield
        finally:
            part_done()

    def time_up(self) -> int:
        """Bring every call's time-up to now (and every later call's at its start): solves stop and answer with
        their best plan so far (FEASIBLE/UNKNOWN), streams end, calls waiting for a slot get UNAVAILABLE. Returns
        how many calls were timed up."""
        with self._lock:
            self.timed_up.set()
            for event in self._time_ups:
                event.set()
            return len(self._time_ups)

    def wait(self, until_monotonic: float, reading_too: bool = False) -> bool:
        """Wait until no call is past its request (``reading_too``: no call at all) or ``until_monotonic``;
        whether none is."""
        def left() -> int:
            return self.calls_in_handler if reading_too else len(self._time_ups)

        with self._lock:
            while left():
                remaining = until_monotonic - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True
