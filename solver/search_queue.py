"""The search's queue of candidates (solver/search.py ``Searcher.best``): (bound, level, choice) in bound order.

The candidates not yet bounded past their quick bound (level 0: every choice that may fit, solver/problem.py
``Problem.order``) are a stream already in that order (quick bound, then index: the heap's order of (quick, 0, i)),
read by position; only the tighter bounds (levels ≥ 1) go through a heap. An entry of the stream comes before the
heap's least exactly where a single heap of both would put it first: its bound is at most the heap's (its level 0
breaks a tie).

Once a plan is known the search's next step on a level-0 candidate is its layer bound (bounds.layer_bound), one
candidate after the other; :meth:`SearchQueue.layer_chunk` takes the stream's next :data:`LAYER_CHUNK` candidates
within the search's limit at once instead (Problem.layer_bounds: their layer sums looked up, the bound in one array
pass; DeepSeek-V3 on 2,048 H800 bounds ~71k choices so). Each goes to the heap at the larger of its two bounds (level
1, where the search takes its mean-unit bound), or, past the limit, is parked: the limit never grows, so such a
choice would never be taken again; :meth:`least` still counts it (the least bound of what is left, which a call cut
short reports). Taking candidates ahead of the heap's order changes no choice solved nor their order: every bound a
choice is queued at is at most its final one (the layer bound is at most the mean-unit bound:
tests/solver/test_layer_bound.py), so the choices are still solved in the order of their final bounds, each under the
same limit (tests/solver/test_search_queue.py).
"""

from __future__ import annotations

import heapq
from typing import Optional

import numpy as np

LAYER_CHUNK = 256  # stream candidates layer-bounded at once: at most this many bounded past where the search stops

Entry = tuple[float, int, int]  # (bound, level, choice)


class SearchQueue:
    """The candidates of one search under one memory cap (module docstring)."""

    def __init__(self, problem, cap_kib: int):
        self.p = problem
        order = problem.order(cap_kib)
        self._fresh = order  # level-0 candidates by (quick bound, index)
        self._fresh_lb = problem.quick_lb[order] if order else np.zeros(0)
        self._pos = 0
        self._heap: list[Entry] = []
        self._parked = float("inf")  # the least bound of the candidates parked past the limit

    def __bool__(self) -> bool:
        return bool(self._heap) or self._pos < len(self._fresh)

    def _fresh_first(self) -> bool:
        """Whether the stream's next entry comes before the heap's least ((b, 0, i) < (b', l ≥ 1, i') iff b ≤ b')."""
        if self._pos >= len(self._fresh):
            return False
        return not self._heap or float(self._fresh_lb[self._pos]) <= self._heap[0][0]

    def peek(self) -> Entry:
        """The least entry (the queue is not empty)."""
        if self._fresh_first():
            return float(self._fresh_lb[self._pos]), 0, self._fresh[self._pos]
        return self._heap[0]

    def pop(self) -> Entry:
        if self._fresh_first():
            self._pos += 1
            return float(self._fresh_lb[self._pos - 1]), 0, self._fresh[self._pos - 1]
        return heapq.heappop(self._heap)

    def push(self, entry: Entry) -> None:
        heapq.heappush(self._heap, entry)

    def least(self, default: float = float("inf")) -> float:
        """The least bound left, parked candidates included; ``default`` where none is left."""
        left = [self._parked] if self._parked < float("inf") else []
        if self._heap:
            left.append(self._heap[0][0])
        if self._pos < len(self._fresh):
            left.append(float(self._fresh_lb[self._pos]))
        return min(left) if left else default

    def layer_chunk(self, limit: Optional[float], done: set[int]) -> None:
        """The stream's next :data:`LAYER_CHUNK` candidates within ``limit`` (all of them while ``limit`` is None), the
        ones in ``done`` skipped, to the heap at level 1 by their layer bound, or parked past ``limit``."""
        start = self._pos
        end = min(start + LAYER_CHUNK, len(self._fresh))
        if limit is not None:
            end = start + int(np.searchsorted(self._fresh_lb[start:end], limit, side="right"))
        idx = [i for i in self._fresh[start:end] if i not in done] if done else self._fresh[start:end]
        bounds = np.maximum(self.p.quick_lb[idx], self.p.layer_bounds(idx)) if idx else np.zeros(0)
        self._pos = end  # (taken once bounded: a call cut short meanwhile leaves them in the stream)
        if limit is not None:
            past = bounds > limit
            if past.any():
                self._parked = min(self._parked, float(bounds[past].min()))
                keep = np.flatnonzero(~past).tolist()
                bounds, idx = bounds[keep], [idx[j] for j in keep]
        heap = self._heap
        for b, i in zip(bounds.tolist(), idx):
            heapq.heappush(heap, (b, 1, i))
