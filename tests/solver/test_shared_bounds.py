"""solver/shared_bounds.py: the bounds' parts that the requests of one spec key share. Two choices of one
``table_key`` (another global batch, so another micro-batch count) have tables that differ in M alone, and of one
``mean_key`` equal mean-bound parts; every bound a problem reads through the shared parts equals the bound of its own
table, request after request (another batch, another GPU count), on random specs (MoE and paired schedules, MTP, the
torch pipeline runtime, trimmed chunks and small memories among them)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmarks.solver_speed import LLAMA8B
from tests.conftest import sized, small_specs
from parplan.costmodel.evaluation.choice import inflight_microbatches
from parplan.costmodel.spec.layout import interleaved_inflight_chunks
from parplan.frameworks.loader import validate_spec
from parplan.solver.bounds import relaxed_bound
from parplan.solver.problem import Problem
from parplan.solver.shared_bounds import mean_key, table_key
from parplan.solver.table_builder import build_table, mean_bound_parts, mean_unit_bound, table_floats
from parplan.solver.warm_cache import WARM

SETTINGS = settings(max_examples=sized(8, 25), deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


pytestmark = pytest.mark.usefixtures("fresh_warm_cache")  # tests/conftest.py


def at(spec, gbs=None, gpus=None):
    """``spec`` at another global batch or GPU count, validated as a request's would be (None where it is none)."""
    data = spec.model_dump(mode="json", exclude_none=True)
    if gbs is not None:
        data["training"]["global_batch_size"] = gbs
    if gpus is not None:
        data["cluster"]["num_gpus"] = gpus
    try:
        return validate_spec(data)
    except Exception:  # noqa: BLE001 - a variant the loader refuses is no request
        return None


def table_at(p: Problem, i: int, scale, exposure: bool = True):
    """Choice ``i``'s table as ``p`` builds it, in ``scale``'s units."""
    moe = p.spec.model.moe
    return build_table(p.costs(i), p.assumptions, p.num_layers, moe.first_dense_layers if moe else 0, moe is not None,
                       p.options.stage_split, p.options.uniform_recompute, scale,
                       recompute_all=p.options.recompute_all_layers, exposure=exposure)


def floats_at(p: Problem, i: int):
    """Choice ``i``'s table_builder.TableFloats as ``p`` builds them alone."""
    moe = p.spec.model.moe
    return table_floats(p.costs(i), p.num_layers, moe.first_dense_layers if moe else 0, moe is not None,
                        p.options.stage_split, p.options.recompute_all_layers)


def assert_equal_but_m(a, b, but=("M", "choice")) -> None:
    """Tables (or TableFloats) ``a`` and ``b`` equal field by field, the fields ``but`` aside."""
    names = a._fields if isinstance(a, tuple) else [f.name for f in dataclasses.fields(a)]
    for name in names:
        if name in but:
            continue
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x is not None and y is not None and np.array_equal(x, y), name
            assert x.dtype == y.dtype, name
        else:
            assert x == y, name


def shared_key_pairs(p1: Problem, p2: Problem, key):
    """(i, j): the choices of ``p1`` and ``p2`` (the first of each key) whose ``key`` is equal."""
    first = {}
    for i, c in enumerate(p1.choices):
        first.setdefault(key(c), i)
    return [(first[k], j) for j, c in enumerate(p2.choices) if (k := key(c)) in first]


def check_one_key(spec, other) -> int:
    """The tables of the choices of ``spec`` and ``other`` that share a table_key, at the first's scale, are equal
    but for M, and so are their TableFloats (the tables' float part, kept by the table_key: solver/problem.py); the
    MeanParts of those that share a mean_key equal; the number of table pairs checked."""
    WARM.disable()
    try:
        p1, p2 = Problem.build(spec), Problem.build(other)
    finally:
        WARM.enable()
    a = p1.assumptions
    pairs = shared_key_pairs(p1, p2, lambda c: table_key(c, p1.spec, a))
    for i, j in pairs[:: max(1, len(pairs) // 15)]:
        assert_equal_but_m(table_at(p1, i, p1.scale), table_at(p2, j, p1.scale))
        assert_equal_but_m(floats_at(p1, i), floats_at(p2, j), but=())
    moe = p1.spec.model.moe
    k, is_moe = (moe.first_dense_layers if moe else 0), moe is not None
    for i, j in shared_key_pairs(p1, p2, lambda c: mean_key(c, p1.spec))[::7]:
        assert (mean_bound_parts(p1.costs(i), a, p1.num_layers, k, is_moe)
                == mean_bound_parts(p2.costs(j), a, p1.num_layers, k, is_moe))
    return len(pairs)


@SETTINGS
@given(spec=small_specs(), data=st.data())
def test_one_key_one_table_but_m(spec, data):
    """Two global batches: the choices of one table_key have tables equal but for M (the same scale), and those of
    one mean_key equal MeanParts."""
    other = at(spec, gbs=data.draw(st.sampled_from([2, 4, 6, 8, 12, 16, 24, 32, 48, 64])))
    assume(other is not None and other.training.global_batch_size != spec.training.global_batch_size)
    assume(check_one_key(spec, other))


def test_in_flight_counts_below_their_cap_are_in_the_key():
    """Interleaved, four stages of two chunks: at m = 4 (= pp) the stages hold m·v chunks, fewer than Megatron's
    warm-up count that caps them from m = 8 on (inflight_microbatches): other tables beyond M, so other keys; the
    tables at m = 8 and 16 share theirs."""
    spec = validate_spec({"model": {**LLAMA8B, "num_layers": 8}, "training": {"seq_len": 1024, "global_batch_size": 4},
                          "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 4, "gpus_per_node": 8},
                          "search": {"pp": [4], "micro_batch_size": [1], "schedules": ["interleaved"], "vpp": [2]}})
    assert len(Problem.build(spec).choices) > 0
    assert check_one_key(spec, at(spec, gbs=8)) == 0
    assert check_one_key(at(spec, gbs=8), at(spec, gbs=16)) > 0


@SETTINGS
@given(spec=small_specs(), data=st.data())
def test_shared_bounds_equal_each_problems_own(spec, data):
    """Requests of one spec key in a row (batches, a GPU count), each reading the parts the ones before left: every
    mean and relaxation bound equals the one of its own costs and tables, and every table built from the float parts
    the ones before left (at another scale or micro-batch count) equals the table built alone."""
    batches = data.draw(st.lists(st.sampled_from([4, 8, 12, 16, 24, 32, 64]), min_size=2, max_size=3))
    requests = [at(spec, gbs=g) for g in batches] + [at(spec, gpus=data.draw(st.sampled_from([2, 4, 8, 16])))]
    requests = [s for s in requests if s is not None]
    assume(len(requests) >= 2)
    checked = 0
    for s in requests:
        p = Problem.build(s)
        assert p.pieces is not None
        moe = p.spec.model.moe
        for i in range(0, len(p.choices), max(1, len(p.choices) // 15)):
            weight, lb = mean_unit_bound(p.costs(i), p.assumptions, p.num_layers, moe.first_dense_layers if moe else 0,
                                         moe is not None, p.scale)
            assert p.mean_bound(i) == float(weight) * lb
            for cap in (p.cap_kib, p.cap_kib // 2):
                assert p.relaxed_bound(i, cap) == relaxed_bound(table_at(p, i, p.scale), cap)
                assert p.relaxed_bound(i, cap, exposure=False) == relaxed_bound(table_at(p, i, p.scale, False), cap)
            assert_equal_but_m(p.table_without_exposure(i), table_at(p, i, p.scale, False), but=())
            checked += 1
    assume(checked)  # (a space with no choice checks nothing)


def test_a_new_batch_reads_the_parts_of_the_last():
    """Llama-3 8B on 8 H100 at 64, then at the first larger batch of the same integer scale (the scale's time unit
    is a power of two of the stage time, so which batches share it depends on the calibration): the second
    request's bounds come from the first's parts (no table built for them) and equal its own tables' bounds."""
    spec = validate_spec({"model": LLAMA8B, "training": {"seq_len": 8192, "global_batch_size": 64},
                          "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 8, "gpus_per_node": 8}})
    p1 = Problem.build(spec)
    for i in range(len(p1.choices)):
        p1.mean_bound(i), p1.relaxed_bound(i, p1.cap_kib)
    p2 = next((p for p in (Problem.build(at(spec, gbs=g)) for g in (72, 80, 88, 96, 104, 112, 120))
               if p.scale == p1.scale), None)
    assert p2 is not None, "no batch of 72-120 shares the 64 batch's scale"
    before = len(p1.pieces.relaxations)
    bounds = [(p2.mean_bound(i), p2.relaxed_bound(i, p2.cap_kib)) for i in range(len(p2.choices))]
    new = len(p2.pieces.relaxations) - before
    assert new < len(p2.choices) * 2 // 3  # a third and more of the choices read the first request's parts
    for i, (_, relaxed) in enumerate(bounds):
        assert relaxed == relaxed_bound(table_at(p2, i, p2.scale), p2.cap_kib)


def test_trimmed_chunks_share_their_tables_past_their_in_flight_cap():
    """Interleaved with a trimmed end chunk (31 layers on 4 stages of 2 chunks): at m = 16 and 32 every stage's
    in-flight counts, and the trimmed chunks' forwards, are at their cap, so the trimmed choices of one base choice
    share a table_key, their tables equal but for M; at m = 2 the trimmed chunks hold fewer forwards: other keys."""
    search = {"pp": [4], "dp": [1], "micro_batch_size": [1], "schedules": ["interleaved"], "vpp": [2]}
    spec = validate_spec({"model": {**LLAMA8B, "num_layers": 31}, "training": {"seq_len": 1024, "global_batch_size": 16},
                          "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 4, "gpus_per_node": 8}, "search": search})
    WARM.disable()
    try:
        p1, p2, p0 = Problem.build(spec), Problem.build(at(spec, gbs=32)), Problem.build(at(spec, gbs=2))
    finally:
        WARM.enable()
    trimmed = lambda c: bool(c.first_chunk_trim or c.last_chunk_trim)  # noqa: E731
    assert any(map(trimmed, p1.choices))
    key = lambda c: table_key(c, p1.spec, p1.assumptions)  # noqa: E731
    pairs = [(i, j) for i, j in shared_key_pairs(p1, p2, key) if trimmed(p1.choices[i])]
    assert len(pairs) == sum(map(trimmed, p1.choices))
    for i, j in pairs:
        assert p1.choices[i].num_microbatches != p2.choices[j].num_microbatches
        assert_equal_but_m(table_at(p1, i, p1.scale), table_at(p2, j, p1.scale))
        assert_equal_but_m(floats_at(p1, i), floats_at(p2, j), but=())
    assert not [i for i, _ in shared_key_pairs(p1, p0, key) if trimmed(p1.choices[i])]



def test_a_trimmed_chunks_forwards_are_in_the_key():
    """Three stages of two chunks at m = 4 and 5: every stage holds its capped in-flight count, but stage 0's first
    chunk holds 4 forwards, then 5 (Megatron's groups of pp micro-batches, layout.interleaved_inflight_chunks), which
    a trimmed first chunk's table reads (table_builder._stage_constants): the keys differ. (Legality asks m to divide
    by pp, under which the stages' counts fix the chunks' in this range; the key does not lean on that rule.)"""
    search = {"pp": [4], "dp": [1], "micro_batch_size": [1], "schedules": ["interleaved"], "vpp": [2]}
    spec = validate_spec({"model": {**LLAMA8B, "num_layers": 31}, "training": {"seq_len": 1024, "global_batch_size": 16},
                          "cluster": {"gpu": "H100-SXM-80GB", "num_gpus": 4, "gpus_per_node": 8}, "search": search})
    p = Problem.build(spec)
    c = next(c for c in p.choices if c.first_chunk_trim).but(pp=3, num_microbatches=4)
    d = c.but(num_microbatches=5)
    assert [inflight_microbatches(c, s) for s in range(3)] == [inflight_microbatches(d, s) for s in range(3)]
    assert interleaved_inflight_chunks(3, 2, 4, 0)[0] != interleaved_inflight_chunks(3, 2, 5, 0)[0]
    assert table_key(c, spec, p.assumptions) != table_key(d, spec, p.assumptions)
    assert table_key(c.but(first_chunk_trim=0), spec, p.assumptions) == table_key(d.but(first_chunk_trim=0), spec,
                                                                                   p.assumptions)
