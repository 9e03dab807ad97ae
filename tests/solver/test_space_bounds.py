"""solver/space_bounds.py: the per-choice arrays a warm-cache entry keeps by space key. A problem built from kept
arrays (a later call of the key, its layer bounds read where an earlier call asked them) holds the same floats, bit
for bit, as one built with the cache off: the quick factors and bounds, the Scale, and the layer bound of every choice
(on random small specs, and on DeepSeek-V3 on 2,048 H800, whose first call asks ~71k); a space of another list is
never served another's arrays; the arrays count in the entry's bytes and go with its clear."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.conftest import sized, small_specs, spec_variant
from parplan.solver.problem import Problem
from parplan.solver.space_bounds import BYTES_PER_CHOICE, SpaceBounds, layer_bounds_kept
from parplan.solver.warm_cache import WARM

pytestmark = pytest.mark.usefixtures("fresh_warm_cache")  # tests/conftest.py


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return x.shape == y.shape and x.tobytes() == y.tobytes()


def alone(spec) -> Problem:
    """The problem of ``spec`` with the warm cache off (every array computed for it alone)."""
    WARM.enabled = False
    try:
        return Problem.build(spec)
    finally:
        WARM.enabled = True


def assert_same_problem_bounds(kept: Problem, own: Problem, asked: list[int]) -> None:
    assert kept.choices == own.choices and kept.scale == own.scale
    for name in ("quick_lb", "quick_mem_kib", "quick_factor"):
        assert same_bits(getattr(kept, name), getattr(own, name)), name
    every = list(range(len(own.choices)))
    # the kept layer bounds of the choices an earlier call asked, the others computed now: all as computed alone
    assert same_bits(kept.layer_lb[asked], own.layer_bounds(asked))
    assert same_bits(kept.layer_bounds(every), own.layer_bounds(every))


@settings(max_examples=sized(8, 20), deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(spec=small_specs(), data=st.data())
def test_a_later_call_reads_the_same_floats_as_a_problem_built_alone(spec, data):
    first = Problem.build(spec)
    assume(first.choices and first.pieces is not None)  # (a spec on several pools has no entry)
    asked = sorted(set(data.draw(st.lists(st.integers(0, len(first.choices) - 1), max_size=40))))
    first.layer_bounds(asked)  # an earlier call's search asks some
    again = Problem.build(spec)
    assert again.layer_lb is first.layer_lb and again.quick_factor is first.quick_factor  # kept, not recomputed
    assert_same_problem_bounds(again, alone(spec), asked)
    other = spec_variant(spec, **{"training.global_batch_size": spec.training.global_batch_size * 2})
    assume(other is not None)
    # another global batch: another space key, its own arrays (as computed alone)
    moved = Problem.build(other)
    assert moved.layer_lb is not first.layer_lb
    assert_same_problem_bounds(moved, alone(other), [])


def test_deepseek_v3_kept_layer_bounds_are_the_bounds_computed_alone():
    from benchmarks.solver_speed import SCENARIOS
    from parplan.frameworks.loader import validate_spec

    spec = validate_spec(next(raw for name, raw in SCENARIOS if "DeepSeek" in name))
    first = Problem.build(spec)
    asked = first.order(first.cap_kib)  # every choice the search may layer-bound, in the queue's order
    for start in range(0, len(asked), 256):  # (the queue's chunks: search_queue.LAYER_CHUNK)
        first.layer_bounds(asked[start:start + 256])
    again = Problem.build(spec)
    assert again.layer_lb is first.layer_lb and not np.isnan(again.layer_lb[asked]).any()
    own = alone(spec)
    assert same_bits(again.layer_bounds(asked), own.layer_bounds(asked))
    assert same_bits(again.quick_lb, own.quick_lb) and same_bits(again.quick_mem_kib, own.quick_mem_kib)


def test_layer_bounds_kept_computes_only_the_missing_and_keeps_them():
    known = np.array([np.nan, 2.0, np.nan, 4.0])
    asked = []

    def compute(idx):
        asked.append(list(idx))
        return np.array([10.0 * i for i in idx])

    assert layer_bounds_kept(known, [3, 0, 1, 2], compute).tolist() == [4.0, 0.0, 2.0, 20.0]
    assert asked == [[0, 2]] and known.tolist() == [0.0, 2.0, 20.0, 4.0]
    assert layer_bounds_kept(known, [2, 0], compute).tolist() == [20.0, 0.0] and asked == [[0, 2]]


def test_another_list_is_never_served_the_kept_arrays_and_they_are_read_only():
    from benchmarks.solver_speed import LLAMA8B
    from parplan.frameworks.loader import validate_spec

    spec = validate_spec({"model": LLAMA8B, "training": {"seq_len": 4096, "global_batch_size": 64},
                          "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8}})
    p = Problem.build(spec)
    pieces = p.pieces
    kept = pieces.bounds(spec, p.options, p.choices)
    assert kept.factors is p.quick_factor and kept.fits(p.choices)
    shorter = p.choices[:-1]
    assert not kept.fits(shorter) and not kept.fits(list(reversed(p.choices)))
    fresh = pieces.bounds(spec, p.options, shorter)
    assert fresh is not kept and fresh.count == len(shorter)
    assert same_bits(fresh.step_lb_s, SpaceBounds.of(spec, shorter, p.gpu, p.assumptions, p.arch).step_lb_s)
    with pytest.raises(ValueError):
        fresh.step_lb_s[0] = 0.0  # shared by the calls of the key: read-only
    before = pieces.nbytes
    pieces.space_bounds.clear()
    assert before - pieces.nbytes == BYTES_PER_CHOICE * len(shorter)
    pieces.bounds(spec, p.options, p.choices)
    pieces.clear()
    assert not pieces.space_bounds
