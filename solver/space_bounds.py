"""The per-choice arrays of one search space that a spec's later calls read again (issue 41: a warm call's ~0.5 s).

Problem.build computes, for every choice of its space, m + the least bubble (tables.Scale.microbatch_factors) and
the quick bounds (bounds.quick_bounds: step time, memory); the search then asks the layer bound (bounds.layer_bound,
Problem.layer_bounds) of most of them. Each is a function of the spec, the choice and the problem's Scale, which the
quick bounds fix (Problem.build): so within one warm-cache entry (solver/warm_cache.py: the spec less its GPU count,
global batch and framework) and one space key (warm_cache.space_key: those three and the space options) they are
the same floats, call after call, and the choices are the same list in the same order (the enumeration is
deterministic, with its memo or without: tests/solver/test_space_patterns.py). On DeepSeek-V3 on 2,048 H800 (116k
choices, 71k layer-bounded) they took ~0.4 s and ~0.3 s of CPU of the second call (load ~5.5), also where its space
is enumerated again (a space too large for the cache's share is not kept: SpecPieces.space). :class:`SpaceBounds` keeps them
by space key (:data:`warm_cache.SPACE_BOUNDS_KEPT`, 32 bytes a choice): the factors and quick bounds whole, the layer
bounds as the search asks them (NaN until then: a layer bound is a finite product of non-negatives).
tests/solver/test_space_bounds.py checks a kept entry gives the same arrays and bounds as a problem built alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from parplan.solver.bounds import quick_bounds
from parplan.solver.tables import Scale

BYTES_PER_CHOICE = 32  # four float64 arrays


@dataclass
class SpaceBounds:
    """Per choice of one space (module docstring): m + the least bubble, the quick step-time bound (seconds) and
    memory bound (KiB), and the layer bound of each choice asked so far (NaN: not yet). Read-only but
    ``layer_lb``, filled by :func:`layer_bounds_kept`."""

    count: int  # the choices of the space they belong to
    ends: tuple  # its first and last choice (None, None without choices): what :meth:`fits` compares
    factors: np.ndarray
    step_lb_s: np.ndarray
    mem_kib: np.ndarray
    layer_lb: np.ndarray

    @staticmethod
    def of(spec, choices: list, gpu, a, arch) -> "SpaceBounds":
        """The arrays of ``choices`` as Problem.build computes them (a space without choices: one factor, 1.0)."""
        factors = Scale.microbatch_factors(choices, a) if choices else np.ones(1)
        step_lb_s, mem_kib = quick_bounds(spec, choices, gpu, a, arch, factors)
        for array in (factors, step_lb_s, mem_kib):
            array.flags.writeable = False  # shared by the calls of the key: never changed in place
        return SpaceBounds(len(choices), _ends(choices), factors, step_lb_s, mem_kib, np.full(len(choices), np.nan))

    def fits(self, choices: list) -> bool:
        """Whether these are the arrays of ``choices`` (the same count and ends: a space of the key is one list)."""
        return self.count == len(choices) and self.ends == _ends(choices)

    @property
    def nbytes(self) -> int:
        return BYTES_PER_CHOICE * self.count


def space_bounds(pieces, spec, options, choices: list, gpu, a, arch) -> SpaceBounds:
    """The SpaceBounds of ``choices`` (the space of ``spec`` under ``options``): kept by ``pieces`` (a warm-cache
    entry, warm_cache.SpecPieces.bounds), or computed for this problem alone without one."""
    return pieces.bounds(spec, options, choices) if pieces is not None else SpaceBounds.of(spec, choices, gpu, a, arch)


def _ends(choices: list) -> tuple:
    return (choices[0], choices[-1]) if choices else (None, None)


def layer_bounds_kept(known: np.ndarray, idx: list[int], compute: Callable[[list[int]], np.ndarray]) -> np.ndarray:
    """The layer bounds of choices ``idx``: those in ``known`` read, the others ``compute``d (Problem's own
    computation, the same floats) and kept there."""
    got = known[idx]
    missing = np.flatnonzero(np.isnan(got))
    if len(missing):
        todo = [idx[j] for j in missing.tolist()]
        fresh = compute(todo)
        got[missing] = fresh
        known[todo] = fresh
    return got
