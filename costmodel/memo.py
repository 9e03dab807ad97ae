"""The per-problem memo of the cost model's shared pieces.

The solver's Problem holds one dict per spec, GPU, assumptions and architecture and passes it to the pieces many
choices share (``comm.Comm.of``, ``gemm_rates.GemmRates.of`` / ``activations.Activations.of`` / ``layer_comm.LayerComm.of``,
``moe_layer.moe_layer_times``; ``choice_context.ChoiceContext.of`` keeps the rates of the GPU and assumptions under one
key). Each piece's key names every field of the choice it reads, so a hit is exactly
the piece that choice would build (``tests/solver/test_layer_bound.py::test_the_shared_pieces_change_no_cost``)."""

from __future__ import annotations

import itertools
from typing import Callable, Hashable, Optional, TypeVar

T = TypeVar("T")


def memoized(memo: Optional[dict], key: Hashable, build: Callable[[], T]) -> T:
    """``memo[key]``, built by ``build()`` on a miss; ``build()`` alone without a memo."""
    if memo is None:
        return build()
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = build()
    return hit


def recent(cache: dict, key: Hashable):
    """``cache[key]`` moved to the end of the cache's order (the most recently used: :func:`bounded_put` drops from
    the front), or None on a miss."""
    hit = cache.pop(key, None)
    if hit is not None:
        cache[key] = hit
    return hit


def bounded_put(cache: dict, key: Hashable, value: T, max_entries: int) -> T:
    """``cache[key] = value`` (returned), the least recently used quarter of the entries dropped first where the cache
    holds ``max_entries`` (its order: least recently put or :func:`recent`-ly read first): an LRU of at most
    ``max_entries``, evicting a batch at a time (one scan of the order's front per ``max_entries // 4`` puts). Safe
    beside the service's other threads: an entry another thread's :func:`recent` took out meanwhile is skipped (a
    race costs a miss, never an error or another key's value)."""
    if len(cache) >= max_entries:
        for old in _oldest(cache, max(1, max_entries // 4)):
            cache.pop(old, None)
    cache[key] = value
    return value


def _oldest(cache: dict, count: int) -> list:
    """The first ``count`` keys of the cache's order. Another thread may change the cache while they are read
    (tests/costmodel/test_memo.py's thread test saw it once in a full run): then ``RuntimeError`` ("dictionary changed
    size during iteration"), and the read is tried again."""
    while True:
        try:
            return list(itertools.islice(cache, count))
        except RuntimeError:
            continue
