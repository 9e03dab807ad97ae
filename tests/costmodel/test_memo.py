"""costmodel/memo.py: the per-problem memo, and the bounded LRU the cost model's process-wide caches use."""

from __future__ import annotations

from parplan.costmodel.memo import bounded_put, memoized, recent


def test_memoized_builds_once_per_key_and_always_without_a_memo():
    calls = []
    memo: dict = {}
    assert memoized(memo, "k", lambda: calls.append(1) or 7) == 7
    assert memoized(memo, "k", lambda: calls.append(1) or 8) == 7
    assert memoized(None, "k", lambda: calls.append(1) or 9) == 9
    assert len(calls) == 2


def test_bounded_put_never_passes_its_entries_and_drops_the_least_recently_used():
    cache: dict = {}
    for i in range(100):
        assert bounded_put(cache, i, str(i), 16) == str(i)
        assert len(cache) <= 16
        assert cache[i] == str(i)  # the entry just put is kept
    kept = set(cache)
    assert kept == set(range(100 - len(cache), 100))  # puts alone: the latest kept


def test_a_recent_read_keeps_an_entry_past_the_eviction_of_older_ones():
    cache: dict = {}
    for i in range(8):
        bounded_put(cache, i, i, 8)
    assert recent(cache, 0) == 0  # 0, the oldest put, read last: the most recently used
    assert recent(cache, "missing") is None
    bounded_put(cache, 8, 8, 8)  # full: the least recently used quarter (1 and 2) goes
    assert 0 in cache and 8 in cache
    assert 1 not in cache and 2 not in cache
    assert len(cache) == 7


def test_threads_reading_and_putting_at_once_keep_the_bound_and_the_values():
    """The service's threads share the cost model's caches: concurrent reads (recent) and puts past the bound
    raise nothing, keep the bound (a put evicts before it adds) and never serve a value under another key."""
    import sys
    import threading

    cache: dict = {}
    errors: list = []

    def work(seed: int) -> None:
        try:
            for i in range(20000):
                key = (seed * 7 + i) % 300
                hit = recent(cache, key)
                if hit is None:
                    bounded_put(cache, key, ("value", key), 64)
                elif hit != ("value", key):
                    errors.append((key, hit))
        except Exception as e:  # noqa: BLE001  (any exception is the failure this test looks for)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between nearly every bytecode: the races come within the run
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert len(cache) <= 64 + len(threads)  # (a put that raced past the length check adds at most one per thread)
